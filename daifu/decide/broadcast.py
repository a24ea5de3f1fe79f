"""Broadcast: a repair saved as `<workspace>/N.broadcast`, applied unasked wherever the crash recurs.

Several processes (data-parallel ranks, parallel trials) usually hit the same crash; the person at
the console repairs it once and broadcasts it, and every process that meets the same crash — same
function, file, line and exception type — applies the same plays without asking. The prototype
pickled these files; they are JSON here, because reading a file another process wrote must never
run code.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daifu.core import kinds
from daifu.store import record
from daifu.store import workspace
from daifu.core.crash import Crash
from daifu.core.decisions import BadDecision, Decision
from daifu.say import say
from daifu.state import RUN

FORMAT = 1


@dataclass(frozen=True)
class Match:
    """A broadcast that applies to a crash: the play to take and the file it came from."""

    decision: Decision
    path: Path


def save(crash: Crash, number: int, taken: list[Decision]) -> Path:
    """Write repair `number` of `crash`, with the plays `taken`, as its broadcast file (`OSError` raised)."""
    path = workspace.broadcast_file(number)
    data = {
        "format": FORMAT,
        "repair": number,
        "function": crash.qualname,
        "file": crash.filename,
        "line": crash.lineno,
        "statement": crash.statement,
        "exception_type": crash.exception_type,
        "exception_repr": repr(crash.exception),
        "plays": [kinds.to_data(decision) for decision in taken],
        "pid": os.getpid(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    workspace.write(path, json.dumps(data, indent=2) + "\n")
    return path


def lookup(crash: Crash) -> Match | None:
    """The broadcast play for `crash`, if a broadcast file matches it.

    Only a first attempt is answered (a broadcast fix that did not help is a question for a
    person); the plays of a broadcast are offered one per refusal, in order.
    """
    if crash.attempt != 1:
        return None
    for path in _broadcast_files():
        data = _load(path)
        if data is None or not _same_crash(data, crash):
            continue
        stored = data.get("plays")
        if not isinstance(stored, list) or len(crash.tried) >= len(stored):
            return None
        try:
            return Match(kinds.from_data(stored[len(crash.tried)]), path)
        except BadDecision as bad:
            _warn_once(path, str(bad))
    return None


def decide(crash: Crash) -> Decision | None:
    """The broadcast play for `crash`, said on the terminal and in the record; `None` if none matches."""
    match = lookup(crash)
    if match is None:
        return None
    play = kinds.play_name(match.decision)
    say(f"{crash.exception_type} at {crash.filename}:{crash.lineno}: applying {play} from the broadcast {match.path}")
    record.note(f"Repair {record.current_number()}: {play} applied from the broadcast {match.path}")
    return match.decision


def _broadcast_files() -> list[Path]:
    try:
        found = [p for p in workspace.folder().glob("*.broadcast") if p.stem.isdigit()]
    except OSError:
        return []
    return sorted(found, key=lambda p: int(p.stem))


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        _warn_once(path, f"unreadable ({error})")
        return None
    if not isinstance(data, dict):
        _warn_once(path, "not a JSON object")
        return None
    return data


def _same_crash(data: dict[str, Any], crash: Crash) -> bool:
    return (data.get("function"), data.get("file"), data.get("line"), data.get("exception_type")) == (
        *crash.site,
        crash.exception_type,
    )


def _warn_once(path: Path, problem: str) -> None:
    if RUN.first_time(f"broadcast {path}"):
        warnings.warn(f"DaiFu ignores the broadcast file {path}: {problem}", RuntimeWarning, 3)
        record.note(f"broadcast file {path} ignored: {problem}")
