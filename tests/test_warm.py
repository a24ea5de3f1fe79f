"""Automatic mode's decision layer loaded ahead of the first crash (`daifu.decide.warm`), in fresh interpreters.

Only a program in automatic mode that vaccinated a function, with torch loaded, gets the loading; it
never imports while a module's body runs; it prints nothing and changes nothing the program sees; and
when it fails, the program runs on as without it, the failure kept in the record at DEBUG level.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYER = ("daifu.decide.automatic", "repairbot.backends.rules", "daifu.core.trial")

TRAIN = """
import sys
import threading

import torch
import daifu
from daifu.decide import warm


@daifu.transform
def train(steps):
    torch.manual_seed(0)
    weight = torch.ones(3)
    for step in range(steps):
        weight = weight - 0.1 * torch.randn(3)
    return weight


started = any(t.name == "daifu-warm" for t in threading.enumerate())
failure = warm.finish()
print(train(4).tolist())
print("warming:", started, repr(failure), [name for name in LAYER + ("httpx",) if name in sys.modules])
"""


def run(tmp_path: Path, code: str, mode: str, hide: str = "") -> subprocess.CompletedProcess[str]:
    """`code` run as a script in a fresh interpreter under `DAIFU_MODE=mode`; `hide`: a package made unimportable."""
    script = tmp_path / "job.py"
    hider = ("import importlib.abc, sys\n"
             "class Hide(importlib.abc.MetaPathFinder):\n"
             "    def find_spec(self, name, path=None, target=None):\n"
             f"        if name.partition('.')[0] == {hide!r}:\n"
             "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
             "sys.meta_path.insert(0, Hide())\n") if hide else ""
    script.write_text(hider + f"LAYER = {LAYER!r}\n" + textwrap.dedent(code))
    env = {"PYTHONPATH": str(ROOT), "DAIFU_RECORD": str(tmp_path / "record.log"), "DAIFU_MODE": mode,
           "DAIFU_APPROVE": "auto", "DAIFU_WORKSPACE": str(tmp_path / "ws")}
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=300)


def test_automatic_mode_loads_the_decision_layer_and_the_program_sees_nothing_of_it(tmp_path: Path) -> None:
    automatic = run(tmp_path, TRAIN, "automatic")
    plain = run(tmp_path, TRAIN, "interactive")
    assert automatic.returncode == 0 and plain.returncode == 0, automatic.stderr + plain.stderr
    result, automatic_line = automatic.stdout.splitlines()
    assert automatic_line == f"warming: True None {list(LAYER)!r}"  # not httpx: no bot service is configured
    assert plain.stdout.splitlines() == [result, "warming: False None []"]  # outside automatic mode: nothing
    assert automatic.stderr == "" and plain.stderr == ""


@pytest.mark.e2e  # a fresh interpreter importing torch; the default run keeps the loading and the fork
def test_no_loading_without_torch(tmp_path: Path) -> None:
    done = run(tmp_path, TRAIN.replace("import torch\n", "").replace("torch.", "__import__('torch')."), "automatic")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "warming: False None []"


@pytest.mark.e2e  # a fresh interpreter importing torch; the default run keeps the loading and the fork
def test_configuring_automatic_mode_after_vaccinating_starts_the_loading(tmp_path: Path) -> None:
    code = TRAIN.replace("started = any(", "daifu.configure(mode='automatic')\nstarted = any(")
    done = run(tmp_path, code, "interactive")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == f"warming: True None {list(LAYER)!r}"


@pytest.mark.e2e  # a fresh interpreter importing torch; the default run keeps the loading and the fork
def test_a_failing_load_does_not_surface_and_the_first_crash_says_what_it_misses(tmp_path: Path) -> None:
    crash = TRAIN + textwrap.dedent("""
        @daifu.transform
        def broken(items):
            total = 0
            for item in items:
                total += 10 // item
            return total


        broken([1, 0])
        """)
    done = run(tmp_path, crash, "automatic", hide="pydantic")
    lines = done.stdout.splitlines()
    assert lines[1].startswith("warming: True ModuleNotFoundError(") and lines[1].endswith(" []"), lines
    assert done.returncode == 1 and "ZeroDivisionError: integer division or modulo by zero" in done.stderr
    assert "automatic mode needs the repair bot's client" in done.stderr  # said by the crash, as without warming
    record = (tmp_path / "record.log").read_text()
    assert "| DEBUG    |" in record and "loading the decision layer ahead of the first crash failed" in record
    assert lines[0] == run(tmp_path, TRAIN, "interactive").stdout.splitlines()[0]


@pytest.mark.e2e  # a fresh interpreter importing torch; the default run keeps the loading and the fork
def test_nothing_is_imported_while_a_module_body_runs(tmp_path: Path) -> None:
    (tmp_path / "trainer.py").write_text(textwrap.dedent("""
        import sys
        import time

        import torch
        import daifu


        @daifu.transform
        def step(x):
            return x + 1


        for _ in range(30):  # the thread is started; it must wait for this body to end
            time.sleep(0.01)
        LOADED_DURING_IMPORT = [name for name in ("daifu.decide.automatic",) if name in sys.modules]
        """))
    code = """
        import sys
        import threading
        import trainer

        for thread in threading.enumerate():
            if thread.name == "daifu-warm":
                thread.join()  # not `warm.finish()`: a crash stops the thread waiting, this waits for it
        print(trainer.LOADED_DURING_IMPORT, [name for name in LAYER if name in sys.modules])
        """
    done = run(tmp_path, code, "automatic")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"[] {list(LAYER)!r}"]


def test_a_fork_while_the_layer_loads_leaves_no_import_half_done_in_the_child(tmp_path: Path) -> None:
    """A `DataLoader`'s workers fork when they like: a child forked in the middle of the thread's import of a
    module, importing it in turn, would wait for ever on a lock no thread of its own holds."""
    code = """
        import os
        import sys

        import torch
        import daifu


        @daifu.transform
        def step(x):
            return x + 1


        for _ in range(20):
            pid = os.fork()
            if pid == 0:
                import daifu.decide.automatic  # what the thread may have been importing at the fork
                os._exit(0)
            assert os.waitpid(pid, 0)[1] == 0
        print("forked", "daifu.decide.automatic" in sys.modules)
        """
    done = run(tmp_path, code, "automatic")
    assert done.returncode == 0 and done.stdout.splitlines() == ["forked True"], done.stderr
