"""The import contract of the layers: what each part of DaiFu loads, checked in a fresh interpreter.

- the runtime core (vaccinating, catching, resuming, a policy's decision) loads no console, bot
  client, service, logging library, pydantic, httpx or fastapi;
- `import daifu` alone loads nothing but `daifu` itself;
- vaccinating a function loads none of what only a crash needs (decisions, surgeries, trials,
  redaction, `multiprocessing`, `difflib`...); a crash and its repair load them then, and work;
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
    layers = ("daifu.console", "daifu.decide.botclient", "daifu.decide.automatic", "daifu.decide.verify",
              "daifu.decide.transport", "daifu.cli", "repairbot")
    assert offenders(modules, HEAVY + layers) == []
    assert "daifu.core.resume" in modules  # the probe did vaccinate and resume


CRASH_PATH = (
    "difflib", "json", "daifu.core.crash", "daifu.core.decisions", "daifu.core.kinds", "daifu.core.surgery",
    "daifu.core.patch", "daifu.core.actions", "daifu.decide.chain", "daifu.report.redact", "daifu.store.repairs",
)
"""What every repair goes through: `import daifu` leaves it alone, the first vaccination loads it (so a
first crash does not pay for it in its restore time: issue 14)."""
USED_ONLY_WHEN_ASKED = (
    "multiprocessing", "socket", "uuid", "datetime", "loguru", "daifu.core.trial", "daifu.core.sandbox",
    "daifu.decide.automatic", "daifu.decide.botclient", "daifu.decide.candidates", "daifu.decide.verify",
    "daifu.decide.transport", "daifu.console",
)
"""Trials, the repair bot's client, the console, loguru: loaded only by the run that uses them."""

CRASH_AFTER_VACCINATING = '''
import sys

before = set(sys.modules)
import daifu

imported = sorted(set(sys.modules) - before)


@daifu.transform
def f(items):
    total = 0
    for item in items:
        total += 10 // item
    return total


vaccinated = sorted(set(sys.modules) - before)
assert f([1, 2]) == 15
fault_free = sorted(set(sys.modules) - before)
FIX = """
@daifu.transform
def f(items):
    total = 0
    for item in items:
        total += 10 // (item or 10)
    return total
"""
daifu.set_policy(lambda crash: daifu.Surgery(FIX))
result = f([1, 0, 2])
crashed = sorted(set(sys.modules) - before)
import json  # only now: the checks above are on `json` too

print(json.dumps({"imported": imported, "vaccinated": vaccinated, "fault_free": fault_free, "crashed": crashed,
                  "result": result}))
'''


def test_the_first_vaccination_loads_the_crash_path_and_only_a_use_loads_the_rest(tmp_path: Path) -> None:
    script = tmp_path / "probe.py"
    script.write_text(CRASH_AFTER_VACCINATING)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "DAIFU_RECORD": str(tmp_path / "record.log")}, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert offenders(seen["imported"], CRASH_PATH + USED_ONLY_WHEN_ASKED) == []
    assert "daifu.core.resume" in seen["vaccinated"]  # the probe did vaccinate
    assert [m for m in CRASH_PATH if m not in seen["vaccinated"]] == []
    assert offenders(seen["fault_free"], USED_ONLY_WHEN_ASKED) == []
    assert offenders(seen["crashed"], USED_ONLY_WHEN_ASKED) == []  # a policy's surgery needs none of them
    assert seen["result"] == 16  # 10//1 + 10//10 + 10//2: the surgery fixed the loop and resumed it
    record = (tmp_path / "record.log").read_text()
    assert "Repairing... Surgery" in record and "Repair 1 End" in record
    entries = (tmp_path / "daifu_workspace" / "repairs.jsonl").read_text().splitlines()
    (entry,) = [json.loads(line) for line in entries]
    assert (entry["decision"], entry["exception_type"]) == ("Surgery", "ZeroDivisionError")


def test_the_service_loads_no_runtime_module(tmp_path: Path) -> None:
    modules = loaded_after("import repairbot.app, repairbot.server", tmp_path)
    assert [m for m in modules if m.startswith("daifu")] == []
