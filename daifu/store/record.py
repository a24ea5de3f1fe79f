"""The record of a run: `experiment_record.log` in the prototype's format, and each repair's entry.

The log has, in order, `Program Begin`, per crash `Repair N Begin`, `Repairing... <Play>` for
each play taken, `Repair N End` (or `Repair Fails`), and `Program End`, each line stamped to the
millisecond as loguru's default format does (`2026-11-30 12:00:00.123 | INFO     | ...`), so the
prototype's scripts read it and restore times are measurable from it. Lines are plain appends:
the record needs no logging library. `Program End` is written by `log_program_end` when the
program calls it (the prototype's API), else when the interpreter exits: `Program End` after a
normal end, `Program End with Exception <type>: <message>` (level ERROR) when an uncaught
exception ended the program. Each repair also becomes one object of `repairs.jsonl`
(`daifu.store.repairs`).
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daifu import config, ranks
from daifu.core.crash import Crash
from daifu.core.decisions import Decision, code_of, play_name
from daifu.state import RUN
from daifu.store import repairs
from daifu.store.lines import LineFile

RECORD_FILE = "experiment_record.log"

_lock = threading.Lock()
_current = threading.local()
_record: dict[str, Any] = {}


def _path() -> Path:
    raw = Path(os.environ.get("DAIFU_RECORD") or RECORD_FILE)
    number = ranks.rank()
    return raw if number is None else raw.with_name(f"{raw.stem}.rank{number}{raw.suffix}")


def _file() -> LineFile:
    """The record file now in effect, begun (`Program Begin`) on first use.

    The main process of a run starts the record afresh, as the prototype did; a child process
    (a DataLoader worker, a `multiprocessing` helper) appends to its parent's.
    """
    path = _path().absolute()
    with _lock:
        current = _record.get("file")
        if current is not None and current.path == path:
            return current  # type: ignore[no-any-return]
        if current is not None:
            current.close()
        fresh = multiprocessing.parent_process() is None
        _record["file"] = LineFile(path, "w" if fresh else "a")
        _record["ended"] = False
    _line("INFO", "Program Begin")
    return _record["file"]  # type: ignore[no-any-return]


@atexit.register
def _close() -> None:
    """At exit: end the main process's record with `Program End` if the program did not, then close it."""
    current = _record.get("file")
    if current is None:
        return
    if not _record.get("ended") and multiprocessing.parent_process() is None:
        # Set by the interpreter when an uncaught exception ends the program (an IPython kernel sets it
        # for the last error a cell showed, so a notebook's record ends with that one).
        error = getattr(sys, "last_value", None)
        if error is None:
            _line("INFO", "Program End")
        else:
            _line("ERROR", f"Program End with Exception {type(error).__name__}: {_one_line(error)}")
    current.close()


def _one_line(error: BaseException) -> str:
    try:
        return " ".join(str(error).split())[:300]
    except Exception:  # an exception whose __str__ fails still ends the record
        return "<message unavailable>"


def _line(level: str, message: str) -> None:
    now = time.time()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"
    number = ranks.rank()
    where = f"rank {number} | " if number is not None else ""
    _record["file"].write(f"{stamp} | {level:<8} | {where}daifu:record:0 - {message}")


def _write(level: str, message: str) -> None:
    _file()
    _line(level, message)


def program_begin() -> None:
    """Write `Program Begin` (once per record file)."""
    _file()


def log_program_end(value: Any = "", folder: str | os.PathLike[str] | None = None, milestone: bool = False) -> None:
    """Write the `Program End` line, with the run's quality measure when given (the prototype's API).

    With `milestone=True`, or while replaying a prototype `REPEAT_ACTIONS` list, the record is also
    copied to `experiment_record_<time>.log` (in `folder` if given), which the prototype's
    repeat-experiment scripts collect.
    """
    _write("INFO", f"Program End with Quality Measure {value}" if value != "" else "Program End")
    _record["ended"] = True
    if milestone or config.TRANSFORM_REGISTRY.get("REPEAT_ACTIONS"):
        target = Path(folder) if folder is not None else Path.cwd()
        try:
            target.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(_record["file"].path, target / f"experiment_record_{time.time()}.log")
        except OSError as error:
            note(f"could not copy the record to {target}: {error}")


def note(text: str) -> None:
    """A free line in the record (refusals, fallbacks), at level WARNING."""
    _write("WARNING", text)


@dataclass
class Entry:
    """One repair being recorded: begun at the crash, ended when execution resumes."""

    number: int
    crash: Crash
    plays: list[str] = field(default_factory=list)
    decision: Decision | None = None
    decided_by: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    """More facts for `repairs.jsonl` (trials and their verdicts, the bot's answer)."""

    def decided(self, decision: Decision, decided_by: str) -> None:
        self.decision, self.decided_by = decision, decided_by
        self.plays.append(play_name(decision))
        _write("INFO", f"Repairing... {play_name(decision)}")

    def refused(self, decision: Decision, decided_by: str, reason: str) -> None:
        _write("WARNING", f"Repair {self.number}: {play_name(decision)} from {decided_by} refused: {reason}")

    def resumed(self, seconds: float) -> None:
        _write("INFO", f"Repair {self.number} End")
        self._save(seconds * 1000.0)

    def failed(self, decided_by: str) -> None:
        self.decided_by = self.decided_by or decided_by
        _write("INFO", "Repair Fails")
        self._save(None)

    def _save(self, duration_ms: float | None) -> None:
        decision = self.decision
        repairs.append(
            {
                "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "repair": self.number,
                "function": self.crash.qualname,
                "file": self.crash.filename,
                "line": self.crash.lineno,
                "kind": self.crash.kind,
                "statement": self.crash.statement,
                "exception_type": self.crash.exception_type,
                "exception_message": self.crash.message,
                "decision": play_name(decision) if decision is not None else "Raise",
                "code": code_of(decision) if decision is not None else None,
                "duration_ms": round(duration_ms, 3) if duration_ms is not None else None,
                "decided_by": self.decided_by,
                "plays": self.plays,
                "pid": os.getpid(),
                "rank": ranks.rank(),
                **self.extra,
            }
        )


def begin(crash: Crash) -> Entry:
    """Start recording the repair of `crash`: writes `Repair N Begin`."""
    _file()
    entry = Entry(RUN.next_number(), crash)
    _current.number = entry.number
    _line("INFO", f"Repair {entry.number} Begin")
    return entry


def current_number() -> int:
    """The number N of the repair this thread began last (`Repair N Begin`); 0 before any.

    The console and the replay name their workspace files `(surgery-N)...` after it, so the
    files, the log and `repairs.jsonl` of one repair share one number.
    """
    return int(getattr(_current, "number", 0))
