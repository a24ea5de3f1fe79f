"""Without the optional packages: DaiFu works, its commands name the extra they need, the suite skips.

DaiFu itself needs only the standard library (`pyproject.toml`: the extras bot, console, trial,
plot). Children run with every optional package made unimportable (an import hook standing in for
a machine where they are not installed): a vaccinated program is repaired by its policy; `daifu
serve`, `daifu demo` and `daifu show --plot` say which extra to install; and pytest collects the
whole suite with no collection error, each test module that needs a package skipped with its name.
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


PROGRAM = """
import sys
import daifu

daifu.set_policy(lambda crash: daifu.Action("item = int(item)"))

@daifu.transform
def add_all(items):
    total = 0
    for item in items:
        total = total + item
    return total

print(add_all([1, "2", 3]), sorted(m for m in HIDDEN_NAMES if m in sys.modules))
"""


def bare(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python args` with every optional package hidden, in `tmp_path`."""
    hide = tmp_path / "hide"
    hide.mkdir(exist_ok=True)
    (hide / "sitecustomize.py").write_text(textwrap.dedent(HIDE))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAIFU_")}
    env.update(PYTHONPATH=os.pathsep.join([str(hide), str(ROOT)]), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    env.update(DAIFU_WORKSPACE=str(tmp_path / "ws"), DAIFU_RECORD=str(tmp_path / "record.log"))
    return subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_a_vaccinated_program_is_repaired_with_no_optional_package(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(PROGRAM).replace("HIDDEN_NAMES", repr(OPTIONAL)))
    done = bare(tmp_path, str(script))
    assert done.returncode == 0 and done.stdout == "6 []\n", done.stderr


def test_each_command_names_the_extra_it_needs(tmp_path: Path) -> None:
    served = bare(tmp_path, "-m", "daifu", "serve", "--port", "0")
    assert served.returncode == 1 and "pip install 'daifu[bot]'" in served.stderr, served.stderr
    demo = bare(tmp_path, "-m", "daifu", "demo")
    assert demo.returncode == 1 and "pip install 'daifu[bot]' with PyTorch" in demo.stderr, demo.stderr
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "metrics.jsonl").write_text('{"time": 1.0, "step": 1, "name": "loss", "value": 0.5}\n')
    plotted = bare(tmp_path, "-m", "daifu", "show", "--plot", str(tmp_path / "run.png"))
    assert plotted.returncode == 1 and "pip install 'daifu[plot]'" in plotted.stderr, plotted.stderr


def test_the_suite_collects_without_any_optional_package(tmp_path: Path) -> None:
    done = bare(tmp_path, "-m", "pytest", "--collect-only", "-q", "-rs", "-p", "no:cacheprovider", str(ROOT / "tests"))
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "ERROR" not in out, out[-5000:]
    skipped = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert skipped and all("could not import" in line for line in skipped), out[-5000:]
    assert any("'torch'" in line for line in skipped) and any("'pexpect'" in line for line in skipped)
    collected = [line for line in out.splitlines() if "::" in line]
    assert any(line.startswith("tests/test_vaccinate.py::") for line in collected)  # the core suite still runs


def test_automatic_mode_without_the_bot_client_says_what_to_install_and_raises_the_crash(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(PROGRAM).replace(
        'daifu.set_policy(lambda crash: daifu.Action("item = int(item)"))',
        'daifu.configure(mode="automatic", approve="auto")',
    ).replace("HIDDEN_NAMES", repr(OPTIONAL)))
    done = bare(tmp_path, str(script))
    assert done.returncode == 1 and "pip install 'daifu[bot]'" in done.stderr, done.stderr
    assert done.stderr.rstrip().endswith("TypeError: unsupported operand type(s) for +: 'int' and 'str'")
