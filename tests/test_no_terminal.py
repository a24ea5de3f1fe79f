"""With no person at a terminal, DaiFu lets a crash through, and says once, on stderr, why and what would let it act.

Each program runs in a real subprocess whose stdin is not a terminal (`/dev/null`), as under a job
scheduler, `nohup` or a pipe. The program meets its crash three times (it catches the first two
itself), so "once" is checked, and the last one ends it with Python's own traceback.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.terminal import TIMEOUT, child_env

PROGRAM = """
import daifu
{configure}

@daifu.transform
def add_all(items):
    total = 0
    for item in items:
        total = total + item
    return total

for attempt in range(2):
    try:
        add_all([1, "2"])
    except TypeError:
        print(f"caught {{attempt}}")
add_all([1, "2"])
"""

HINT = (
    'To let DaiFu act: daifu.configure(mode="automatic", approve="auto"), a policy (daifu.set_policy), '
    "or `daifu replay`."
)


def run_without_terminal(tmp_path: Path, configure: str = "") -> subprocess.CompletedProcess[str]:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(PROGRAM.format(configure=configure)))
    return subprocess.run(
        [sys.executable, str(script)],
        env=child_env(tmp_path),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def declined_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("DaiFu: TypeError in add_all")]


def test_interactive_mode_says_once_that_no_person_is_there_beside_the_traceback(tmp_path: Path) -> None:
    done = run_without_terminal(tmp_path)
    assert done.returncode == 1 and done.stdout == "caught 0\ncaught 1\n"
    lines = declined_lines(done.stderr)
    assert len(lines) == 1, done.stderr
    assert "no person is at a terminal to open the (DaiFu) console" in lines[0] and lines[0].endswith(HINT)
    assert f"{tmp_path / 'job.py'}:9" in lines[0]  # the user's file and line of the faulty statement
    traceback = done.stderr[done.stderr.index("Traceback (most recent call last)") :]
    assert traceback.rstrip().endswith("TypeError: unsupported operand type(s) for +: 'int' and 'str'")
    assert done.stderr.index(lines[0]) < done.stderr.index("Traceback")


def test_approve_ask_says_once_that_its_suggestions_were_not_applied(tmp_path: Path) -> None:
    pytest.importorskip("httpx")  # the repair bot's client
    pytest.importorskip("pydantic")
    done = run_without_terminal(tmp_path, 'daifu.configure(mode="automatic", approve="ask")')
    assert done.returncode == 1 and done.stdout == "caught 0\ncaught 1\n"
    lines = declined_lines(done.stderr)
    assert len(lines) == 1, done.stderr
    assert "approve='ask' needs a person at a terminal, and none is there" in lines[0]
    assert lines[0].endswith('To let DaiFu act: approve="auto" (verified repairs only), approve="remote" (a person '
                             'in a browser), or a policy.')
    assert done.stderr.rstrip().endswith("TypeError: unsupported operand type(s) for +: 'int' and 'str'")
