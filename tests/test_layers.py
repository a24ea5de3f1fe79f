"""The import contract of the layers: what each part of DaiFu loads, checked in a fresh interpreter.

- the runtime core (vaccinating, catching, resuming, a policy's decision) loads no console, bot
  client, service, logging library, pydantic, httpx or fastapi;
- `import daifu` alone loads nothing but `daifu` itself;
- the repair-bot service (`repairbot.app`) loads no module of the runtime.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("loguru", "pydantic", "httpx", "fastapi", "starlette", "uvicorn", "openai", "pdb", "better_exceptions")


def loaded_after(code: str, folder: Path) -> list[str]:
    """The modules loaded in a fresh interpreter once `code` (run as a script in `folder`) ran."""
    script = folder / "probe.py"
    script.write_text(textwrap.dedent(code) + "\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))\n")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=folder,
        env={"PYTHONPATH": str(ROOT), "DAIFU_RECORD": str(folder / "record.log")}, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def offenders(modules: list[str], forbidden: tuple[str, ...]) -> list[str]:
    return [m for m in modules if m.split(".")[0] in forbidden or m.startswith(forbidden)]


def test_import_daifu_loads_only_daifu(tmp_path: Path) -> None:
    modules = loaded_after("import daifu", tmp_path)
    assert [m for m in modules if m.startswith("daifu")] == ["daifu"]
    assert offenders(modules, HEAVY) == []


def test_the_core_loads_no_console_bot_client_service_or_heavy_library(tmp_path: Path) -> None:
    modules = loaded_after(
        """
        import daifu

        @daifu.transform
        def f(items):
            total = 0
            for item in items:
                total += 10 // item
            return total

        daifu.set_policy(lambda crash: daifu.Skip())
        assert f([1, 0, 2]) == 15
        """,
        tmp_path,
    )
    layers = ("daifu.console", "daifu.decide.botclient", "daifu.decide.automatic", "daifu.cli", "repairbot")
    assert offenders(modules, HEAVY + layers) == []
    assert "daifu.core.resume" in modules  # the probe did vaccinate and resume


def test_the_service_loads_no_runtime_module(tmp_path: Path) -> None:
    modules = loaded_after("import repairbot.app, repairbot.server", tmp_path)
    assert [m for m in modules if m.startswith("daifu")] == []
