"""The record of a run: `experiment_record.log` (seed format) and `daifu_workspace/repairs.jsonl`.

The log has, in order, `Program Begin`, per crash `Repair N Begin`, `Repairing... <Play>` for
each play taken, `Repair N End` (or `Repair Fails`), and `Program End`; loguru's timestamps make
restore times measurable from it. The JSON-lines file holds one object per repair. Writing
either never costs the run: an `OSError` is reported once and the run goes on.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import loguru


from daifu import config, distributed
from daifu.crash import Crash
from daifu.decisions import Action, Decision, Raise, Retry, Skip, Surgery
from daifu.redact import redact


def _own_logger() -> Any:
    """A loguru logger with handlers of its own.

    The application's handlers (loguru's default one prints every line on stderr) must not print
    the record: it would mix into the console and repeat each repair's JSON. Loguru's documented
    recipe, `copy.deepcopy(logger)`, fails while the global logger holds a stderr handler, so the
    logger is built from a fresh core; should that private constructor change, the global logger
    is used instead.
    """
    try:
        from loguru._logger import Core, Logger

        return Logger(Core(), None, 0, False, False, False, False, True, [], {})
    except (ImportError, TypeError):
        return loguru.logger


logger = _own_logger()
atexit.register(logger.remove)  # files closed, and flushed, at exit


RECORD_FILE = "experiment_record.log"
REPAIRS_FILE = "repairs.jsonl"
_PLAYS = {Surgery: "Surgery", Action: "Action", Skip: "Pass", Retry: "Retry", Raise: "Raise"}

history: list[dict[str, Any]] = []
"""Every repair of this run, as written to `repairs.jsonl` (newest last)."""

_lock = threading.Lock()
_numbers = itertools.count(1)
_current = threading.local()
_sink: dict[str, Any] = {}
_jsonl_sinks: dict[str, int] = {}
_log = logger.bind(daifu_record=True)


def _per_rank(path: Path) -> Path:
    """`path` for this rank: `experiment_record.rank1.log` in a multi-rank job, else unchanged."""
    number = distributed.rank()
    return path if number is None else path.with_name(f"{path.stem}.rank{number}{path.suffix}")


def _ensure_sink() -> None:
    """Open the record file's sink on first use (and again if `DAIFU_RECORD` changed)."""
    raw = os.environ.get("DAIFU_RECORD") or RECORD_FILE
    if _sink.get("raw") == raw:
        return
    with _lock:
        if _sink.get("raw") == raw:
            return
        if "id" in _sink:
            logger.remove(_sink.pop("id"))
        path = _per_rank(Path(raw)).resolve()
        rank = distributed.rank()
        line = "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <8} | " + (f"rank {rank} | " if rank is not None else "")
        try:
            _sink["id"] = logger.add(
                path,
                format=line + "{name}:{function}:{line} - {message}",
                filter=lambda r: r["extra"].get("daifu_record", False),
            )
        except OSError as error:
            warnings.warn(f"DaiFu cannot write its record {path}: {error}", RuntimeWarning, 3)
        _sink["raw"] = raw
        _log.info("Program Begin")


def _jsonl_writer(path: Path) -> Any:
    """A logger bound to the JSON-lines file `path`.

    Writes are synchronous: loguru's `enqueue` costs about four times as much in the writing thread
    (it pickles each record), and a line is on disk when the repair resumes.
    """
    key = str(path)
    with _lock:
        if key not in _jsonl_sinks:
            path.parent.mkdir(parents=True, exist_ok=True)
            _jsonl_sinks[key] = logger.add(
                path, format="{message}", filter=lambda r: r["extra"].get("daifu_jsonl") == key
            )
    return logger.bind(daifu_jsonl=key)


def flush() -> None:
    """Wait until every record line written so far is in its file."""
    logger.complete()


def program_begin() -> None:
    """Write `Program Begin` (once per record file)."""
    _ensure_sink()


def log_program_end(value: Any = "") -> None:
    """Write the `Program End` line, with the run's quality measure when given (seed API)."""
    _ensure_sink()
    _log.info(f"Program End with Quality Measure {value}" if value != "" else "Program End")
    flush()


def note(text: str) -> None:
    """A free line in the record (refusals, fallbacks)."""
    _ensure_sink()
    _log.warning(text)


def play_name(decision: Decision) -> str:
    """The seed's name of a decision's play: Surgery, Action, Pass, Retry or Raise."""
    return _PLAYS.get(type(decision), type(decision).__name__)


@dataclass
class Entry:
    """One repair being recorded: begun at the crash, ended when execution resumes."""

    number: int
    crash: Crash
    plays: list[str] = field(default_factory=list)
    decision: Decision | None = None
    decided_by: str = ""

    def decided(self, decision: Decision, decided_by: str) -> None:
        self.decision, self.decided_by = decision, decided_by
        self.plays.append(play_name(decision))
        _log.info(f"Repairing... {play_name(decision)}")

    def refused(self, decision: Decision, decided_by: str, reason: str) -> None:
        _log.warning(f"Repair {self.number}: {play_name(decision)} from {decided_by} refused: {reason}")

    def resumed(self, seconds: float) -> None:
        _log.info(f"Repair {self.number} End")
        self._write(seconds * 1000.0)

    def failed(self, decided_by: str) -> None:
        self.decided_by = self.decided_by or decided_by
        _log.info("Repair Fails")
        self._write(None)

    def _write(self, duration_ms: float | None) -> None:
        decision = self.decision
        code = getattr(decision, "source", None) or getattr(decision, "code", None)
        item = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "repair": self.number,
            "function": self.crash.qualname,
            "file": self.crash.filename,
            "line": self.crash.lineno,
            "kind": self.crash.kind,
            "statement": self.crash.statement,
            "exception_type": self.crash.exception_type,
            "exception_message": redact(str(self.crash.exception)),  # the record is shown and shared
            "decision": play_name(decision) if decision is not None else "Raise",
            "code": code,
            "duration_ms": round(duration_ms, 3) if duration_ms is not None else None,
            "decided_by": self.decided_by,
            "plays": self.plays,
            "pid": os.getpid(),
            "rank": distributed.rank(),
        }
        history.append(item)
        path = repairs_path()
        try:
            _jsonl_writer(path).info(json.dumps(item))
        except OSError as error:
            warnings.warn(f"DaiFu cannot write {path}: {error}", RuntimeWarning, 2)


def begin(crash: Crash) -> Entry:
    """Start recording the repair of `crash`: writes `Repair N Begin`."""
    _ensure_sink()
    entry = Entry(next(_numbers), crash)
    _current.number = entry.number
    _log.info(f"Repair {entry.number} Begin")
    return entry


def current_number() -> int:
    """The number N of the repair this thread began last (`Repair N Begin`); 0 before any.

    The console and the replay name their workspace files `(surgery-N)...` after it, so the
    files, the log and `repairs.jsonl` of one repair share one number.
    """
    return int(getattr(_current, "number", 0))


def repairs_path() -> Path:
    """The JSON-lines record of the workspace now in effect (this rank's, in a multi-rank job)."""
    return _per_rank(config.settings().workspace / REPAIRS_FILE)


def all_repairs(folder: Path | None = None) -> list[dict[str, Any]]:
    """The repairs of every JSON-lines record in the workspace (one per rank), by time."""
    folder = folder or config.settings().workspace
    entries = [entry for path in sorted(folder.glob("repairs*.jsonl")) for entry in load(path)]
    return sorted(entries, key=lambda entry: (str(entry.get("time", "")), entry.get("rank") or 0))


def load(path: Path | None = None) -> list[dict[str, Any]]:
    """The repairs recorded in a JSON-lines record (default: `repairs_path()`), oldest first.

    Only parses: a record is data, and reading it never runs code. Raises `OSError` when the
    file cannot be read, `ValueError` when a line is not a JSON object.
    """
    flush()
    path = path or repairs_path()
    entries = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        item = json.loads(line)
        if not isinstance(item, dict):
            raise ValueError(f"{path} line {number} is not a JSON object")
        entries.append(item)
    return entries
