"""Without the optional packages, the suite skips what needs them, saying which, instead of failing.

DaiFu itself needs only the standard library (`pyproject.toml`: the extras bot, console, trial,
plot). A child pytest collects the whole suite with every optional package made unimportable (an
import hook standing in for a machine where they are not installed): no collection error, and
each test module that needs one is skipped with the missing package's name.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPTIONAL = (
    "torch", "numpy", "fastapi", "starlette", "uvicorn", "httpx", "openai", "pydantic", "loguru", "better_exceptions",
    "pyseccomp", "matplotlib", "pexpect", "hypothesis", "nbclient", "nbformat", "ipykernel",
)  # fmt: skip

HIDE = f"""
import importlib.abc
import sys

HIDDEN = {set(OPTIONAL)!r}


class Hidden(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, Hidden())
"""


def test_the_suite_collects_without_any_optional_package(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent(HIDE))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAIFU_")}
    env.update(PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-rs", "-p", "no:cacheprovider", str(ROOT / "tests")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "ERROR" not in out, out[-5000:]
    skipped = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert skipped and all("could not import" in line for line in skipped), out[-5000:]
    assert any("'torch'" in line for line in skipped) and any("'pexpect'" in line for line in skipped)
    collected = [line for line in out.splitlines() if "::" in line]
    assert any(line.startswith("tests/test_vaccinate.py::") for line in collected)  # the core suite still runs
