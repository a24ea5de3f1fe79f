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
    'To let DaiFu act: DAIFU_MODE=automatic DAIFU_APPROVE=auto (in the environment) or '
    'daifu.configure(mode="automatic", approve="auto") (in code), a policy (daifu.set_policy), or `daifu replay`.'
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
    assert lines[0].endswith(
        'To let DaiFu act: DAIFU_APPROVE=auto (in the environment) or daifu.configure(approve="auto") (in code) '
        '(verified repairs only), DAIFU_APPROVE=remote (in the environment) or daifu.configure(approve="remote") '
        '(in code) (a person in a browser), or a policy.'), lines[0]
    assert "is the default" not in lines[0]  # approve was given
    assert done.stderr.rstrip().endswith("TypeError: unsupported operand type(s) for +: 'int' and 'str'")


def test_under_daifu_run_the_hint_names_only_what_the_shell_can_set(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(PROGRAM.format(configure="")))
    done = subprocess.run([sys.executable, "-m", "daifu", "run", "--entry", "add_all", str(script)],
                          env=child_env(tmp_path), cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=TIMEOUT)
    lines = declined_lines(done.stderr)
    assert len(lines) == 1 and lines[0].endswith(
        "To let DaiFu act: DAIFU_MODE=automatic DAIFU_APPROVE=auto, a policy (daifu.set_policy), or `daifu replay`."
    ), done.stderr


def test_automatic_mode_alone_says_that_approve_defaults_to_ask(tmp_path: Path) -> None:
    pytest.importorskip("httpx")  # the repair bot's client
    pytest.importorskip("pydantic")
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(PROGRAM.format(configure="")))
    done = subprocess.run([sys.executable, str(script)], env=child_env(tmp_path, DAIFU_MODE="automatic"),
                          cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT)
    lines = declined_lines(done.stderr)
    assert len(lines) == 1, done.stderr
    assert ("approve='ask' needs a person at a terminal, and none is there (`ask` is the default: without a "
            "person, only approve='auto' applies a repair)") in lines[0]
    assert lines[0].endswith(
        'To let DaiFu act: DAIFU_APPROVE=auto (in the environment) or daifu.configure(approve="auto") (in code) '
        '(verified repairs only), DAIFU_APPROVE=remote (in the environment) or daifu.configure(approve="remote") '
        '(in code) (a person in a browser), or a policy.'), lines[0]
