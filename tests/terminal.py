"""Driving a program through a real pseudo-terminal, as a person at the `(DaiFu)` prompt would.

pexpect is imported when a terminal is spawned: `child_env` serves tests that run a program with
no terminal at all, which need no pexpect.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pexpect

PROGRAMS = Path(__file__).parent / "programs"
_WAITS_ON_INPUT = {"x86_64": {0, 7, 23, 270, 271}, "aarch64": {63, 72, 73}}
"""The system calls a read of the terminal sleeps in (read, poll, select, pselect6, ppoll), by machine."""
PROMPT = "(DaiFu) "
TIMEOUT = 60  # seconds: a hung child fails the test instead of hanging CI (a busy machine is slow, not hung)


def child_env(tmp_path: Path, colour: bool = False, **extra: str) -> dict[str, str]:
    """The environment of a child: workspace and record in `tmp_path`, a terminal without colours unless asked."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("DAIFU_") and k not in ("NO_COLOR", "VISUAL", "EDITOR")
    }
    env.update(DAIFU_WORKSPACE=str(tmp_path / "ws"), DAIFU_RECORD=str(tmp_path / "experiment_record.log"))
    env["TERM"] = "xterm-256color" if colour else "dumb"
    env.update(extra)
    return env


@dataclass
class Terminal:
    """A child under a pseudo-terminal; `command` types a line and returns what it printed."""

    child: pexpect.spawn
    workspace: Path

    def wait_prompt(self) -> str:
        self.child.expect_exact(PROMPT)
        return _clean(self.child.before)

    def wait_reading(self) -> None:
        """Wait until the child sleeps in its read of the terminal, not just until its prompt is drawn.

        readline draws the prompt before it waits for input; a Ctrl-C sent in between sets Python's
        pending-signal flag, and the wait that follows does not see it until the next key. A
        person never types that fast; a test must not either. Asleep is not enough on a busy
        machine: a thread waiting for the interpreter's lock (another thread holds it) sleeps too, so
        where the kernel tells the system call the child sleeps in, it must be a wait on a file
        (`_WAITS_ON_INPUT`). Linux only (`/proc`); elsewhere a pause.
        """
        stat = Path(f"/proc/{self.child.pid}/stat")
        if not stat.exists():
            time.sleep(1.0)
            return
        deadline, asleep = time.monotonic() + TIMEOUT, 0
        while asleep < 3:  # reading at three looks in a row, 20 ms apart: waiting for input
            if time.monotonic() > deadline:
                raise TimeoutError(f"the child {self.child.pid} never waited for input")
            state = stat.read_text().rsplit(")", 1)[1].split()[0]
            asleep = asleep + 1 if state == "S" and _waits_on_input(self.child.pid) else 0
            time.sleep(0.02)

    def command(self, line: str) -> str:
        self.child.sendline(line)
        return self.wait_prompt()

    def leave_to_prompt(self, line: str = "q") -> str:
        """Type `line`, which leaves the console, and wait for the console to open again."""
        return self.command(line)

    def leave(self, line: str = "q") -> str:
        """Type `line`, then read everything up to the end of the program."""
        self.child.sendline(line)
        return self.finish()

    def finish(self) -> str:
        import pexpect

        self.child.expect(pexpect.EOF)
        self.child.close()
        return _clean(self.child.before)

    @property
    def status(self) -> int | None:
        return self.child.exitstatus

    def surgery_file(self, n: int = 1, func: str = "main") -> Path:
        return self.workspace / f"(surgery-{n}){func}.py"

    def action_file(self, n: int = 1, func: str = "main") -> Path:
        return self.workspace / f"(action-{n}){func}.py"


def spawn(
    tmp_path: Path, args: Sequence[str], colour: bool = False, command: str = sys.executable, **extra: str
) -> Terminal:
    """Start `command args` under a pseudo-terminal in `tmp_path`."""
    import pexpect

    child = pexpect.spawn(
        command,
        list(args),
        env=child_env(tmp_path, colour, **extra),
        cwd=str(tmp_path),
        encoding="utf-8",
        timeout=TIMEOUT,
        dimensions=(50, 200),
    )
    return Terminal(child, tmp_path / "ws")


def program(name: str) -> str:
    return str(PROGRAMS / name)


def _clean(text: str) -> str:
    return text.replace("\r\n", "\n")


def line_of(name: str, text: str) -> int:
    """The line number of the first line of program `name` that contains `text`."""
    for number, line in enumerate((PROGRAMS / name).read_text().splitlines(), 1):
        if text in line:
            return number
    raise LookupError(f"{text!r} is not in {name}")


def _waits_on_input(pid: int) -> bool:
    """Whether the child's main thread sleeps in a system call that waits on a file; `True` where the
    kernel does not tell (`/proc/PID/syscall` unreadable, another machine), as before this check."""
    waits = _WAITS_ON_INPUT.get(os.uname().machine)
    try:
        first = Path(f"/proc/{pid}/syscall").read_text().split()[0]
    except (OSError, IndexError):
        return True
    if waits is None or not first.lstrip("-").isdigit():
        return True
    return int(first) in waits
