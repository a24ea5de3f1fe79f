"""Replay: re-apply the repairs of a recorded run, in order, with no one at the terminal.

Rerunning an experiment reproducibly means taking, at each crash, the decision taken the first
time. Two records are understood:

- the prototype's `TRANSFORM_REGISTRY['REPEAT_ACTIONS'] = ['Surgery', 'Action', 'Pass', ...]`: one
  element per repair N, its code read from the workspace files `(surgery-N)<func>.py` and
  `(action-N)<func>.py`. `Pass` runs the faulty statement again, as in the prototype. An element
  may be a list of plays for one crash (`['Action', 'Surgery']`): they are carried out together,
  in order, as one decision (`Plays`); a `Pass` or `Retry` among other plays changes nothing
  (the prototype ignores them);
- `configure(mode="replay")`: the successful repairs of the last recorded run in
  `<workspace>/repairs.jsonl`, which also say where each crash was, so a crash that differs is
  noticed. Entries written before `Skip` had its name (no `plays_version`) say `Pass` for a skip,
  and are read so.

Each offer of a crash takes the next recorded repair, as each crash took the next element in the
prototype: when the runtime refuses one (state untouched), the next answers. When the run
departs from the record, the replay stops, says why (a warning and a record line), and every
later crash goes on down the decision chain (the console at a terminal, else it raises).
"""

from __future__ import annotations

import threading
import warnings
from collections import deque
from dataclasses import dataclass
from typing import Any

from daifu import config
from daifu.core import kinds
from daifu.say import say
from daifu.state import RUN
from daifu.store import record, repairs
from daifu.store import workspace
from daifu.config import Settings
from daifu.core.crash import Crash
from daifu.core.decisions import BadDecision, Decision, Plays, Retry


@dataclass(frozen=True)
class Step:
    """One recorded repair: its number N, its plays, and where it happened when the record says.

    `stored` is the `repairs.jsonl` entry that records it (`daifu.core.kinds.from_row` reads it); `None`
    for the prototype's format, whose code lives in the workspace files.
    """

    number: int
    names: tuple[str, ...]
    stored: dict[str, Any] | None = None
    function: str | None = None
    line: int | None = None
    exception_type: str | None = None

    def mismatch(self, crash: Crash) -> str | None:
        """Why `crash` is not the crash this step repaired, or `None`."""
        if self.function is None:
            return None
        recorded = (self.function, self.line, self.exception_type)
        if recorded == (crash.qualname, crash.lineno, crash.exception_type):
            return None
        return (
            f"the record has {self.exception_type} in {self.function} line {self.line}, "
            f"this run has {crash.exception_type} in {crash.qualname} line {crash.lineno}"
        )

    def decision(self, crash: Crash) -> Decision:
        """This step as one decision; `BadDecision` or `OSError` when it cannot be read."""
        if self.stored is not None:
            return kinds.from_row(self.stored)
        plays = [self._play(name, crash) for name in self.names]
        if len(plays) > 1:
            plays = [play for play in plays if not isinstance(play, Retry)] or [Retry()]
        return plays[0] if len(plays) == 1 else Plays(tuple(plays))  # type: ignore[arg-type]

    def _play(self, name: str, crash: Crash) -> Decision:
        if name not in ("Surgery", "Action"):
            return kinds.from_play(name, None)
        path = (workspace.surgery_file if name == "Surgery" else workspace.action_file)(
            self.number, crash.function_name
        )
        return kinds.from_play(name, path.read_text(encoding="utf-8"))


class Stopped(Exception):
    """The run departed from the record; the message says where and how."""


class Replay:
    """The recorded repairs not yet replayed.

    steps: the recorded repairs still ahead; stopped: set once the run departed from the record, for good.
    """

    def __init__(self, steps: list[Step], origin: str) -> None:
        self.steps = deque(steps)
        self.origin = origin
        self.stopped = False

    def answer(self, crash: Crash) -> Decision:
        """The next recorded decision, for `crash`; `Stopped` when there is none or it does not fit."""
        if not self.steps:
            raise Stopped(f"{self.origin} has no more repairs")
        step = self.steps.popleft()
        mismatch = step.mismatch(crash)
        if mismatch is not None:
            raise Stopped(f"repair {step.number} does not match: {mismatch}")
        try:
            return step.decision(crash)
        except (BadDecision, OSError) as error:
            raise Stopped(f"repair {step.number} cannot be replayed: {error}") from None


_lock = threading.Lock()


def decide(crash: Crash, settings: Settings) -> Decision | None:
    """The next recorded decision; `None` once the run departed from the record (the chain goes on)."""
    with _lock:
        replay = RUN.replay if RUN.replay is not None else _start(settings)
        if replay.stopped:
            return None
        try:
            decision = replay.answer(crash)
        except Stopped as stop:
            replay.stopped = True
            _say_stopped(str(stop))
            return None
    say(
        f"replay: {'+'.join(kinds.step_names(decision))} for {crash.exception_type} in "
        f"{crash.qualname} line {crash.lineno}"
    )
    return decision


def _start(settings: Settings) -> Replay:
    repeat = config.TRANSFORM_REGISTRY.get("REPEAT_ACTIONS")
    try:
        replay = Replay(*(_seed_steps(repeat) if repeat else _record_steps(settings)))
    except Stopped as stop:
        _say_stopped(str(stop))
        replay = Replay([], "")
        replay.stopped = True
    RUN.replay = replay
    return replay


def _seed_steps(repeat: Any) -> tuple[list[Step], str]:
    """Steps of the prototype's `REPEAT_ACTIONS` list."""
    if not isinstance(repeat, (list, tuple)):
        raise Stopped(f"REPEAT_ACTIONS is {repeat!r}, not a list of plays")
    steps = []
    for number, element in enumerate(repeat, 1):
        names = tuple(element) if isinstance(element, (list, tuple)) else (element,)
        unknown = [name for name in names if name not in kinds.REPLAYABLE]
        if unknown or not names:
            raise Stopped(f"REPEAT_ACTIONS[{number - 1}] is {element!r}; plays are {', '.join(kinds.REPLAYABLE)}")
        steps.append(Step(number, names))
    return steps, "REPEAT_ACTIONS"


def _record_steps(settings: Settings) -> tuple[list[Step], str]:
    """Steps of the last recorded run in `repairs.jsonl` that was not itself a pure replay."""
    path = settings.workspace / repairs.REPAIRS_FILE
    try:
        entries = repairs.load(path)
    except OSError as error:
        raise Stopped(f"there is no record to replay: {error}") from None
    except ValueError as error:
        raise Stopped(f"{path} is not a DaiFu record: {error}") from None
    run = _last_run([e for e in entries if e.get("decision") not in (None, "Raise")])
    steps = [
        Step(
            e.get("repair", n),
            (str(e["decision"]),),
            e,
            e.get("function"),
            e.get("line"),
            e.get("exception_type"),
        )
        for n, e in enumerate(run, 1)
    ]
    return steps, str(path)


def _last_run(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries of the most recent process whose repairs were not all replayed from this record."""
    runs: list[list[dict[str, Any]]] = []
    for entry in entries:
        if runs and runs[-1][0].get("pid") == entry.get("pid"):
            runs[-1].append(entry)
        else:
            runs.append([entry])
    first_hand = [run for run in runs if any(entry.get("decided_by") != "replay" for entry in run)]
    return (first_hand or runs or [[]])[-1]


def _say_stopped(reason: str) -> None:
    message = f"DaiFu replay stopped: {reason}; later crashes go to the console, or raise"
    warnings.warn(message, RuntimeWarning, 2)
    record.note(message)
