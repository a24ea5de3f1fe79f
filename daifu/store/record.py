"""The record of a run: `experiment_record.log` in the prototype's format, and each repair's entry.

The log has, in order, `Program Begin`, per crash `Repair N Begin`, `Repairing... <Play>` for
each play taken, `Repair N End` (or `Repair Fails`), and `Program End`, each line stamped to the
millisecond as loguru's default format does (`2026-11-30 12:00:00.123 | INFO     | ...`), so the
prototype's scripts read it and restore times are measurable from it. Every event is one line:
a message with line breaks (an exception's text) is written with ` ⏎ ` in their place.

The life cycle is the prototype's. The main process starts the record afresh, with `Program
Begin`, when it first needs it (the first vaccination, never at import) — unless
`<record>.lock` exists: a restarted run then appends to the record of the run it continues.
A child process (a DataLoader worker) appends to its parent's. `log_program_end` writes `Program
End`, copies the record to `experiment_record_<time>.log` when the run is a repeated experiment
(`'REPEAT_ACTIONS'` set in `TRANSFORM_REGISTRY`, even to `None`) or a milestone, and removes the lock;
a program that does not call it gets its `Program End` at exit (`Program End with Exception <type>:
<message>`, level ERROR, when an uncaught exception ended it).

Lines are plain appends through one line-buffered file: the record needs no logging library.
The program's own lines from loguru's logger (`daifu.logger`, the prototype's) come in through
`loguru_sink`, a sink that writes through that same file, so both kinds keep their order and
never overwrite each other. Each repair also becomes one object of `repairs.jsonl`
(`daifu.store.repairs`).
"""

from __future__ import annotations

import atexit
import functools
import math
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daifu import config, ranks
from daifu.say import say
from daifu.state import RUN
from daifu.store import credit, repairs
from daifu.store.lines import LineFile

# The record is begun at the first vaccination; what only a repair's entry needs (decisions, the
# redaction of messages, `repairs.jsonl`) is imported where it is used, at the first crash.
if TYPE_CHECKING:
    from datetime import datetime

    from daifu.config import Settings
    from daifu.core.account import Account, Firing
    from daifu.core.handling import RepairEntry
    from daifu.core.crash import Crash
    from daifu.core.decisions import Decision

RECORD_FILE = "experiment_record.log"

_lock = threading.Lock()
_current = threading.local()
_record: dict[str, Any] = {}


def _raw_path() -> Path:
    """`DAIFU_RECORD`: the record's path, or a folder to hold `experiment_record.log` (one that exists, or a
    path written with a trailing `/`): a folder given there once left the run with no record at all."""
    given = os.environ.get("DAIFU_RECORD") or RECORD_FILE
    path = Path(given)
    return path / RECORD_FILE if given.endswith(("/", os.sep)) or path.is_dir() else path


def _path() -> Path:
    raw = _raw_path()
    number = ranks.rank()
    return raw if number is None else raw.with_name(f"{raw.stem}.rank{number}{raw.suffix}")


def lock_path() -> Path:
    """`experiment_record.log.lock`: while it exists, a new run continues the record instead of
    starting it afresh (the prototype's convention for restarted runs; one lock for every rank)."""
    raw = _raw_path().absolute()
    return raw.with_name(raw.name + ".lock")


def _main_process() -> bool:
    # A child of `multiprocessing` (forked, spawned or from a fork server) has it loaded before any of
    # its code runs: a process without it is a main process, and importing it here would cost 8 ms.
    process = sys.modules.get("multiprocessing.process")
    return process is None or process.parent_process() is None


def _file() -> LineFile:
    """The record file now in effect, begun on first use.

    The main process starts it afresh with `Program Begin`, unless the lock file says this run
    continues the last one; a child process appends to its parent's.
    """
    key = (os.environ.get("DAIFU_RECORD"), ranks.rank(), os.getcwd())  # what the path depends on:
    current = _record.get("file")  # compared before building a `Path` (a sixth of a repeated crash's restore)
    if current is not None and _record.get("key") == key:
        return current  # type: ignore[no-any-return]
    path = _path().absolute()
    with _lock:
        current = _record.get("file")
        _record["key"], _record["rank"] = key, key[1]
        if current is not None and current.path == path:
            return current  # type: ignore[no-any-return]
        if current is not None:
            current.close()
        fresh = _main_process() and not lock_path().exists()
        if fresh:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(b"")
            except OSError:
                pass  # the first write says so, once
        _record["file"] = LineFile(path, "a")  # appends even after a truncation: no writer overwrites another
        _record["ended"] = False
    if fresh:
        _line("INFO", "Program Begin")
    if "loguru" in sys.modules:  # a program that logs with loguru gets its lines in the record, as before
        loguru_logger()
    return _record["file"]  # type: ignore[no-any-return]


@atexit.register
def _close() -> None:
    """At exit: end the main process's record with `Program End` if the program did not (`Program End
    with Exception <type>: <message>`, level ERROR, when an uncaught exception ended it), then close it."""
    current = _record.get("file")
    if current is None:
        return
    if not _record.get("ended") and _main_process():
        # Set by the interpreter when an uncaught exception ends the program (an IPython kernel sets it
        # for the last error a cell showed, so a notebook's record ends with that one).
        error = getattr(sys, "last_value", None)
        if error is None:
            _line("INFO", "Program End")
        else:
            _line("ERROR", f"Program End with Exception {type(error).__name__}: {one_line(_message(error))[:300]}")
    current.close()


def _message(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:  # an exception whose __str__ fails still ends the record
        return "<message unavailable>"


def edit_in_short(decision: Decision, running: str) -> str:
    """`decision` in a few words for a line of the terminal: its play, and its code in short (of a
    surgery, the lines it changes in `running`, the source of the version that crashed; of a patch,
    the callee it replaces, under its name)."""
    from daifu.core.decisions import Patch, Plays, Surgery
    from daifu.core.kinds import play_name, step_names

    if isinstance(decision, Plays):
        return "+".join(step_names(decision))
    code = code_in_short(decision, running)
    if isinstance(decision, Surgery) and not code:
        return "Surgery (lines removed)"
    if isinstance(decision, Patch):
        return f"Patch of {decision.target}" + (f" `{code}`" if code else "")
    return play_name(decision) + (f" `{code}`" if code else "")


def code_in_short(decision: Decision, running: str) -> str:
    """The code `decision` carries, on one line (`daifu.core.gist`): a surgery's lines that `running`
    lacks, a patch's new body, an action's statements (a `def` by its header); `""` when it carries none."""
    from daifu.core.kinds import code_of

    code = code_of(decision) or ""
    if not code:  # a retry, a skip: nothing more to import in the restore window
        return ""
    from daifu.core.decisions import Patch, Surgery
    from daifu.core.gist import body, statements

    if isinstance(decision, Surgery):  # what changed, not the whole function
        old = _stripped_lines(running)
        lines = [line.strip() for line in code.splitlines() if line.strip() and line.strip() not in old]
    elif isinstance(decision, Patch):  # the callee's new body
        lines = body(code)
    else:
        lines = statements(code)
    return _cut("; ".join(lines))


@functools.lru_cache(maxsize=4)
def _stripped_lines(source: str) -> frozenset[str]:
    """The lines of `source`, stripped: what a surgery's lines are compared with. A pure function of
    the text, kept for the few sources last asked about: each surgery of a run is compared with the
    version it changes, and the terminal line of its repair is composed inside the restore window."""
    return frozenset(line.strip() for line in source.splitlines())


def _cut(text: str, limit: int = 100) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def one_line(text: str) -> str:
    """`text` with its line breaks shown as ` ⏎ `: one event stays one line for line-oriented readers."""
    return " ⏎ ".join(text.splitlines()) if text else text


def _line(level: str, message: str, source: str = "daifu:record:0", when: datetime | None = None) -> None:
    """One line of the record, stamped with `when` (a loguru line's time) or now, to the millisecond."""
    if when is None:
        now = time.time()
        stamp = _second(int(now)) + f"{int(now * 1000) % 1000:03d}"
    else:
        stamp = when.strftime("%Y-%m-%d %H:%M:%S.") + f"{when.microsecond // 1000:03d}"
    number = _record.get("rank")  # the rank the file in effect was chosen for
    where = f"rank {number} | " if number is not None else ""
    _record["file"].write(f"{stamp} | {level:<8} | {where}{source} - {one_line(message)}")


@functools.lru_cache(maxsize=2)
def _second(second: int) -> str:
    """A record line's time stamp up to its milliseconds: every line of one second shares it.
    `time`, not `datetime` (1.5 ms to import): the record begins at the first vaccination."""
    return time.strftime("%Y-%m-%d %H:%M:%S.", time.localtime(second))


def loguru_sink(message: Any) -> None:
    """A loguru sink writing each of the program's log lines into the record, in its format."""
    record = message.record
    text = str(message).rstrip("\n")  # the message, and the traceback of `logger.exception`
    _file()
    _line(record["level"].name, text, f"{record['name']}:{record['function']}:{record['line']}", record["time"])


def loguru_logger() -> Any:
    """loguru's logger, with the record as one of its sinks (once per process): `daifu.logger`."""
    from loguru import logger

    with _lock:
        if "sink" not in _record:
            _record["sink"] = logger.add(loguru_sink, format="{message}", colorize=False)
    return logger


def _write(level: str, message: str) -> None:
    _file()
    _line(level, message)


def program_begin() -> None:
    """Begin the record, if this process has not yet (at the first vaccination)."""
    _file()


def log_program_end(value: Any = "", folder: str | os.PathLike[str] | None = None, milestone: bool = False) -> None:
    """Write `Program End`, with the run's quality measure when given (the prototype's API).

    When `'REPEAT_ACTIONS'` is in `TRANSFORM_REGISTRY` (a repeated experiment, even with `None`)
    or `milestone` is true, the record is copied to `experiment_record_<time.time()>.log` — in
    `folder` (relative to the working directory, created if needed), else beside the record —
    which the prototype's repeat-experiment scripts collect. Then the lock file is removed.
    Only the main process ends the program; in a child process this does nothing.
    """
    if not _main_process():
        return
    _write("INFO", f"Program End with Quality Measure {value}" if value != "" else "Program End")
    _record["ended"] = True
    if milestone or "REPEAT_ACTIONS" in config.TRANSFORM_REGISTRY:
        source = _record["file"].path
        target = Path.cwd() / folder if folder is not None else source.parent
        try:
            target.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target / f"{source.stem}_{time.time()}{source.suffix}")
        except OSError as error:
            note(f"could not copy the record to {target}: {error}")
    try:
        lock_path().unlink(missing_ok=True)
    except OSError as error:
        note(f"could not remove {lock_path()}: {error}")


def note(text: str) -> None:
    """A free line in the record (refusals, fallbacks), at level WARNING."""
    _write("WARNING", text)


def debug(text: str) -> None:
    """A free line in the record at level DEBUG: what DaiFu did for itself that changed nothing in the run
    (the decision layer's loading ahead of the first crash failed, and the crash loaded it)."""
    _write("DEBUG", text)


@dataclass
class Entry:
    """One repair being recorded: begun at the crash, ended when execution resumes."""

    number: int
    crash: Crash
    settings: Settings | None = None
    """The configuration the crash is handled under: its record goes to that workspace."""
    plays: list[str] = field(default_factory=list)
    decision: Decision | None = None
    decided_by: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    """More facts for `repairs.jsonl` (trials and their verdicts, the bot's answer)."""
    rank: int | None = None
    """The rank the record file of this repair was chosen for (`begin`): its lines and its JSON line say it."""
    refusals: set[str] = field(default_factory=set)
    """The refusals said on the terminal: a decider that offers the same decision again is not said twice."""

    def decided(self, decision: Decision, decided_by: str) -> None:
        from daifu.core.kinds import step_names

        self.decision, self.decided_by = decision, decided_by
        for name in step_names(decision):  # one line per play, as the prototype writes a list's
            self.plays.append(name)
            _line("INFO", f"Repairing... {name}")

    def refused(self, decision: Decision, decided_by: str, reason: str) -> None:
        from daifu.core.kinds import step_names

        what = "+".join(step_names(decision))
        _line("WARNING", f"Repair {self.number}: {what} from {decided_by} refused: {reason}")
        told = f"repair {self.number}: {edit_in_short(decision, self.crash.source)} from {decided_by} refused: {reason}"
        if told not in self.refusals:  # the terminal says why, not only the record: "not repaired" must be explained
            self.refusals.add(told)
            say(told)

    def resumed(self, started: float) -> None:
        """The run resumes now; `started` was `time.perf_counter()` at the crash.

        The restore time recorded covers everything from the crash to here, the record included,
        but the wait for a person (`waited_ms`, recorded and said apart: the person's time, not
        DaiFu's): it is measured once the log line is written and the JSON line and the terminal
        line are composed, so only writing those two lines comes after it.
        """
        _line("INFO", f"Repair {self.number} End")
        settings = self.settings
        item, target = self._item(), repairs.repairs_path(settings.workspace if settings is not None else None)
        trial = f"; {self.extra['trial']}" if self.extra.get("trial") else ""
        passed = self._passed()
        told = f"repair {self.number}: {self._where()}: {self._what()} (by {self._by()}){trial}{passed}; resumed in"
        waited = float(self.extra.get("waited_ms") or 0.0)
        milliseconds = (time.perf_counter() - started) * 1000.0 - waited
        item["duration_ms"] = round(milliseconds, 3)
        repairs.append(item, target)
        say(f"{told} {milliseconds:.1f} ms" + (f", after {waited / 1000:.1f} s waiting for a person" if waited else ""))

    def _passed(self) -> str:
        """What the repair passed over, for its terminal line; or that the item a loop failed to load is
        loaded again (`daifu.core.refetch`), or why it could not be."""
        passed = self.extra.get("passed_over")
        if passed is None:
            return f"; {self.extra['loaded_again']}" if self.extra.get("loaded_again") else ""
        why = passed["firing"].get("why")
        return f"; {passed['text']}" + (f"; the item the loop failed to load is not loaded again: {why}" if why else "")

    def failed(self, decided_by: str) -> None:
        self.decided_by = self.decided_by or decided_by
        _line("INFO", "Repair Fails")
        repairs.append(self._item())
        say(f"repair {self.number}: {self._where()}: not repaired ({self._by()}); the exception goes on")

    def _by(self) -> str:
        """Who decided (the person by name where the page gave one, and where), and who suggested it when
        that was someone else; a repair `approve="auto"` applied is the bot's."""
        decider, suggester = credit.credit(self.decided_by, self.extra, self.decision is not None)
        if decider == credit.AUTOMATIC:
            return suggester
        if decider != credit.PERSON:
            return decider
        who = self.extra.get("decided_by_person") or "a person"
        where = {"approval page": "on the approval page"}.get(str(self.extra.get("decided_at")),
                                                              f"at the {self.extra.get('decided_at')}")
        return f"{who} {where}" + (f", suggested by {suggester}" if suggester not in (credit.PERSON, "") else "")

    def _where(self) -> str:
        crash = self.crash
        return f"{crash.exception_type} at {os.path.basename(crash.filename)}:{crash.lineno} in {crash.qualname}"

    def _what(self) -> str:
        return "nothing" if self.decision is None else edit_in_short(self.decision, self.crash.source)

    def _item(self) -> dict[str, Any]:
        """This repair's line of `repairs.jsonl`; its `duration_ms` is `None` until it resumes."""
        from daifu.core.kinds import to_row
        from daifu.report.redact import redact

        decision = self.decision
        decided_by, suggested_by = credit.credit(self.decided_by, self.extra, decision is not None)
        return {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "repair": self.number,
            "function": self.crash.qualname,
            "file": self.crash.filename,
            "line": self.crash.lineno,
            "kind": self.crash.kind,
            "statement": self.crash.statement,
            "exception_type": self.crash.exception_type,
            "exception_message": redact(self.crash.message),  # the record is shown and shared
            "attempt": self.crash.attempt,  # 2 and more: the run made no progress since the last repair here
            **to_row(decision),
            "duration_ms": None,
            "plays": self.plays,
            "pid": os.getpid(),
            "rank": self.rank,
            **self.extra,
            "decided_by": decided_by,
            "suggested_by": suggested_by,
        }


def passed_over(account: Account, firing: Firing, entry: RepairEntry | None) -> None:
    """Record what a repair passed over this time (`daifu.core.account`): as a fact of `entry` when it
    fires as the repair of a crash (its line of `repairs.jsonl` and of the terminal say it), else
    (a surgery's probe, later in the run) on a line of its own on the terminal and in `repairs.jsonl`."""
    data = {"firing": firing.to_data(), **account.to_data()}
    if entry is not None:
        entry.extra["passed_over"] = data
        return
    number = account.repairs[-1] if account.repairs else None
    say(f"repair {number} at {account.where}, {firing.what}: {account.describe()}")
    event = {"event": repairs.PASSED_OVER, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "repair": number,
             "function": account.site[0], "file": account.site[1], "line": account.site[2], "pid": os.getpid(),
             "rank": ranks.rank(), **data}
    try:
        repairs.append_event(event)
    except OSError as error:
        note(f"could not record what repair {number} passed over: {error}")


def begin(crash: Crash, settings: Settings | None = None) -> Entry:
    """Start recording the repair of `crash`, handled under `settings`: writes `Repair N Begin`.

    The record file in effect is found here, once: every later line of this repair is written to it
    without looking for it again (that look, the environment, the rank and the working directory,
    was a sixth of a repeated crash's restore when each line paid it)."""
    _file()
    entry = Entry(RUN.next_number(), crash, settings, rank=_record.get("rank"))
    losses = _losses_at(crash)
    if losses:
        entry.extra["losses"] = losses
    _current.number = entry.number
    _line("INFO", f"Repair {entry.number} Begin")
    return entry


def _losses_at(crash: Crash) -> dict[str, float | None]:
    """The loss values the crashed frame held (`daifu.core.health.losses`), for `daifu show --plot` to draw
    a run that logs no metrics; a value that is not finite is `None` (JSON has no NaN)."""
    from daifu.core.health import losses

    return {name: value if math.isfinite(value) else None for name, value in losses(crash.locals).items()}


def current_number() -> int:
    """The number N of the repair this thread began last (`Repair N Begin`); 0 before any.

    The console and the replay name their workspace files `(surgery-N)...` after it, so the
    files, the log and `repairs.jsonl` of one repair share one number.
    """
    return int(getattr(_current, "number", 0))
