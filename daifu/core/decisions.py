"""The decisions a policy, the console or the repair bot can take on a crash, and how they are stored.

Each decision is a small immutable value; the runtime (`daifu.core.resume`) carries it out. This
module is also the one codec of decisions: the record, the replay, broadcast files, the
distributed store and the bot client all write a decision as `to_data(decision)` and read it
back with `from_data`, which never runs code (the code runs only when the runtime carries the
decision out). Stored decisions use the prototype's play names (`Surgery`, `Action`, `Pass`), which
its records and `REPEAT_ACTIONS` lists rely on, plus DaiFu's own (`Retry`, `Skip`, ...).

`Pass` is the prototype's name for running the faulty statement again unchanged; DaiFu's skip is
`Skip`. `repairs.jsonl` entries written before `Skip` had its own name say `Pass` for a skip: they
carry no `plays_version`, and `from_data(entry, PLAYS_VERSION_1)` reads them as written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Retry:
    """Run the faulty statement again, unchanged.

    On a loop header it asks the same iterator for its next item, so a batch that failed to load
    is passed over; on an `if`/`while` test or a `with` expression it evaluates it again.
    """


@dataclass(frozen=True)
class Pass(Retry):
    """Run the faulty statement again, unchanged, recorded as `Pass` (the prototype's name for it).

    The console's `pass` and a recorded `Pass` (`REPEAT_ACTIONS`) take it; it does what `Retry` does.
    """


@dataclass(frozen=True)
class Skip:
    """Go on after the faulty statement (the console's `skip`).

    The names the statement would have assigned keep their old values (or stay unbound). On a
    header the whole compound statement is left: a `for` or `while` ends as if exhausted (its
    `else` runs), an `if` takes neither branch, a `with` body does not run.
    """


@dataclass(frozen=True)
class SkipIteration:
    """Leave the rest of the current iteration of the innermost loop holding the faulty statement.

    As a `continue` there would: the loop goes on with its next item (a `for`) or its next test (a
    `while`); nothing the rest of the iteration would have done is done, so a bad batch is not
    trained on. Refused when the faulty statement is in no loop of the function.
    """


@dataclass(frozen=True)
class Action:
    """Run `code` in the live context of the faulty frame, then run the faulty statement again.

    The code reads and rebinds the function's local variables and the module's globals.
    """

    code: str


@dataclass(frozen=True)
class Surgery:
    """Replace the vaccinated function by `source` (the whole new `def`), and resume in it.

    Execution resumes at the statement of the new source that corresponds to the faulty one, or at
    the first changed statement earlier in the interrupted iteration when the fix is further up,
    at any nesting of the faulty statement (`daifu.core.surgery.resume_path`).
    """

    source: str


@dataclass(frozen=True)
class Patch:
    """Give the function `target` (`module:qualname`, a function the crashed statement called) the
    code of `source` (its whole new `def`), in place, then run the faulty statement again.

    Every reference to the function follows (its code is swapped, as live-update tools do); it
    keeps its name, parameters, defaults and closure, which the new source may not change.
    """

    target: str
    source: str


@dataclass(frozen=True)
class Raise:
    """Give up: the original exception propagates with its original traceback."""


@dataclass(frozen=True)
class Plays:
    """Several plays for one crash, carried out in order, then one resume (`[['Action', 'Surgery']]`).

    Each action runs on the state the previous steps left, each surgery is validated against the
    version the previous one produced; the run resumes where the last step that moves the resume
    point says (a surgery's resume point, `Skip`, `SkipIteration`), else at the faulty statement.
    If any step is refused, the whole is, and the program is left as it was (an action's in-place
    mutations of objects excepted, as for a single action). `Raise`, `Patch` and `Plays` cannot be
    steps.
    """

    steps: tuple[Retry | Skip | SkipIteration | Action | Surgery, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.steps, tuple) or not self.steps:
            raise BadDecision("Plays needs a non-empty tuple of steps")
        for step in self.steps:
            if not isinstance(step, STEP_TYPES):
                raise BadDecision(f"{step!r} cannot be one of several plays (only {', '.join(_STEP_NAMES)})")


Decision = Retry | Skip | SkipIteration | Action | Surgery | Patch | Raise | Plays
STEP_TYPES: tuple[type, ...] = (Retry, Skip, SkipIteration, Action, Surgery)
DECISION_TYPES: tuple[type, ...] = (Retry, Skip, SkipIteration, Action, Surgery, Patch, Raise, Plays)

PLAY_NAMES: dict[type, str] = {
    Surgery: "Surgery",
    Action: "Action",
    Pass: "Pass",
    Skip: "Skip",
    SkipIteration: "SkipIteration",
    Patch: "Patch",
    Retry: "Retry",
    Raise: "Raise",
    Plays: "Plays",
}
"""The name each decision is stored under: the prototype's play names, plus DaiFu's own."""

_BY_NAME: dict[str, type] = {name: kind for kind, name in PLAY_NAMES.items()}
_STEP_NAMES = ("Surgery", "Action", "Pass", "Retry", "Skip", "SkipIteration")
REPLAYABLE = ("Surgery", "Action", "Pass", "Retry", "Skip", "SkipIteration", "Patch")
"""Play names a record may ask to replay (`Raise` is the absence of a repair; a list of plays is
written as a list of these names)."""

PLAYS_VERSION = 2
"""Written into each `repairs.jsonl` entry: in version 2, `Pass` is a retry and `Skip` a skip."""
PLAYS_VERSION_1 = 1
"""Entries without `plays_version`: their `Pass` was a skip."""


class BadDecision(ValueError):
    """Stored data that is not a decision DaiFu can carry out; the message names what is wrong."""


def is_decision(value: Any) -> bool:
    """Whether `value` is one of DaiFu's decisions."""
    return isinstance(value, DECISION_TYPES)


def play_name(decision: Decision) -> str:
    """The name `decision` is stored under (`Plays` for several plays: see `step_names`)."""
    return PLAY_NAMES[type(decision)]


def step_names(decision: Decision) -> list[str]:
    """The play names of `decision`, one per step: the record writes a `Repairing...` line for each."""
    if isinstance(decision, Plays):
        return [play_name(step) for step in decision.steps]
    return [play_name(decision)]


def code_of(decision: Decision) -> str | None:
    """The code a decision carries: an action's statements, a surgery's or a patch's new source."""
    if isinstance(decision, (Surgery, Patch)):
        return decision.source
    if isinstance(decision, Action):
        return decision.code
    return None


def from_play(name: str, code: str | None, target: str | None = None, version: int = PLAYS_VERSION) -> Decision:
    """The decision stored as play `name` with `code` (surgery, action and patch need their code,
    a patch its `target`); `version` 1 reads `Pass` as a skip, as DaiFu wrote it then."""
    kind = _BY_NAME.get(name)
    if kind is None or kind is Plays:
        raise BadDecision(f"unknown play {name!r}; known: {', '.join(n for n in PLAY_NAMES.values() if n != 'Plays')}")
    if kind is Pass and version == PLAYS_VERSION_1:
        return Skip()
    if kind in (Surgery, Action, Patch):
        if not isinstance(code, str) or not code.strip():
            raise BadDecision(f"the {name} play has no code")
        if kind is Patch:
            if not isinstance(target, str) or not target:
                raise BadDecision("the Patch play names no function to patch")
            return Patch(target, code)
        return Surgery(code) if kind is Surgery else Action(code)
    return kind()  # type: ignore[no-any-return]


def to_data(decision: Decision) -> dict[str, Any]:
    """`decision` as JSON-ready data: `{"play": name, "code": code or None}` (and a patch's `target`,
    the `steps` of several plays)."""
    data: dict[str, Any] = {"play": play_name(decision), "code": code_of(decision)}
    if isinstance(decision, Patch):
        data["target"] = decision.target
    if isinstance(decision, Plays):
        data["steps"] = [to_data(step) for step in decision.steps]
    return data


def from_data(data: Any, version: int = PLAYS_VERSION) -> Decision:
    """The decision `to_data` wrote; `BadDecision` for anything else. `version`: see `from_play`."""
    if not isinstance(data, dict):
        raise BadDecision(f"a stored decision must be an object, not {type(data).__name__}")
    if data.get("play") == "Plays":
        steps = data.get("steps")
        if not isinstance(steps, list) or any(isinstance(step, dict) and step.get("play") == "Plays" for step in steps):
            raise BadDecision("stored Plays need a list of steps, none of them Plays")
        decoded: tuple[Any, ...] = tuple(from_data(step, version) for step in steps)
        return Plays(decoded)  # its steps are checked as it is made
    return from_play(str(data.get("play")), data.get("code"), data.get("target"), version)
