"""Every kind of decision and every name it goes by, in one table; every encoding of a decision derives from it.

A decision is stored (the record's play names: `repairs.jsonl`, the replay, broadcast files, the
distributed store), proposed by the repair bot (its suggestion kinds), chosen on the approval page of
`approve="remote"` (its choices) and typed at the console (its words). `KINDS` gives each kind of
decision its name in each, and what it carries; the codecs below read nothing else. A new kind of
decision is a class in `daifu.core.decisions`, a row here, and its carrying out in the runtime
(`daifu.core.resume`): see "Adding a decision kind" in `docs/architecture.md`.

The bot's kinds and the page's choices are the vocabulary of `repairbot.protocol` (`SuggestionKind`,
`Choice`, with the page's labels); the core does not import the protocol (it would load pydantic on
the crash path), and `tests/test_kinds.py` checks that the two agree.

Stored decisions use the prototype's play names (`Surgery`, `Action`, `Pass`), which its records and
`REPEAT_ACTIONS` lists rely on, plus DaiFu's own (`Retry`, `Skip`, ...). `Pass` is the prototype's
name for running the faulty statement again unchanged; DaiFu's skip is `Skip`. `repairs.jsonl` entries
written before `Skip` had its own name say `Pass` for a skip: they carry no `plays_version`, and are
read as written (`PLAYS_VERSION_1`). Decoding never runs code: the code runs only when the runtime
carries the decision out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from daifu.core.decisions import (
    Action,
    BadDecision,
    Decision,
    Pass,
    Patch,
    Plays,
    Raise,
    Retry,
    Skip,
    SkipIteration,
    Surgery,
)

HERE = "here"
"""Where a kind resumes: the faulty statement runs again."""
AFTER = "after"
"""The run goes on after the faulty statement (a `for` or `while` header: the loop ends as if exhausted)."""
NEXT_ITERATION = "next iteration"
"""The innermost loop holding the faulty statement goes on with its next iteration."""
NEW_SOURCE = "new source"
"""The new version resumes at the statement that takes the faulty one's place."""
STEPS = "steps"
"""Where the last step that moves the resume point says, else here."""
NOWHERE = "nowhere"
"""The run does not resume: the original exception goes on."""


@dataclass(frozen=True)
class Kind:
    """One kind of decision and the names it goes by.

    type: its class. play: the name the record stores it under. code, target: the attributes holding
    the code it carries (an action's statements, a surgery's or patch's new `def`) and a patch's
    target, stored as `code` and `target`. wire: the repair bot's suggestion kind that proposes it
    (`None`: the bot never does). choice: the approval page's choice that takes it by itself (`None`:
    the page takes it only as a suggestion or an edit). word: the console's word for it (its command,
    or its argument of `trial` and `edit`; `None`: none). command: the help of the console command
    named `word` that takes it as it is (`None`: no such command; surgery and action have commands of
    their own, which read their files). resumes: where the run goes on (`HERE`...); first: what it
    does before, in words, when it resumes `HERE` and does something (the console says it).
    step: it may be one of several plays (`Plays`). replayable: a record may ask to replay it.
    skips_work: it leaves work out (a statement, an iteration): ranked last, bounded per site.
    harmless: whatever it carries, applied without a trial it cannot throw trained state away.
    """

    type: type
    play: str
    code: str | None = None
    target: str | None = None
    wire: str | None = None
    choice: str | None = None
    word: str | None = None
    command: str | None = None
    resumes: str = HERE
    first: str | None = None
    step: bool = True
    replayable: bool = True
    skips_work: bool = False
    harmless: bool = False


KINDS: tuple[Kind, ...] = (
    Kind(Pass, "Pass", word="pass", harmless=True,
         command="Change nothing: the faulty statement runs again when you leave with `q` "
                 "(as the prototype's `pass`)."),
    Kind(Retry, "Retry", wire="retry", choice="retry", word="retry",
         command="Run the faulty statement again, unchanged, when you leave with `q`.", harmless=True),
    Kind(Skip, "Skip", wire="skip", choice="skip", word="skip", resumes=AFTER, skips_work=True,
         command="Skip the faulty statement: the program goes on after it when you leave with `q`."),
    Kind(SkipIteration, "SkipIteration", wire="skip_iteration", choice="skip_iteration", word="iteration",
         resumes=NEXT_ITERATION, skips_work=True, harmless=True),
    Kind(Action, "Action", code="code", wire="action", word="action", first="the action runs in the faulty frame"),
    Kind(Surgery, "Surgery", code="source", wire="surgery", word="surgery", resumes=NEW_SOURCE),
    Kind(Patch, "Patch", code="source", target="target", wire="patch_function", step=False,
         first="the callee's code is replaced"),
    Kind(Raise, "Raise", choice="reject", resumes=NOWHERE, step=False, replayable=False),
    Kind(Plays, "Plays", resumes=STEPS, step=False, replayable=False),
)  # fmt: skip
"""Every kind of decision, the plain ones first (the console lists its commands in this order)."""

_BY_TYPE = {kind.type: kind for kind in KINDS}
_BY_PLAY = {kind.play: kind for kind in KINDS}
_BY_WIRE = {kind.wire: kind for kind in KINDS if kind.wire}
_BY_CHOICE = {kind.choice: kind for kind in KINDS if kind.choice}
_BY_WORD = {kind.word: kind for kind in KINDS if kind.word}

REPLAYABLE = tuple(kind.play for kind in KINDS if kind.replayable)
"""Play names a record may ask to replay (`Raise` is the absence of a repair; a list of plays is
written as a list of these names)."""
PLAYS_VERSION = 2
"""Written into each `repairs.jsonl` entry: in version 2, `Pass` is a retry and `Skip` a skip."""
PLAYS_VERSION_1 = 1
"""Entries without `plays_version`: their `Pass` was a skip."""


def kind_of(decision: Decision) -> Kind:
    """The row of `decision`'s kind; `BadDecision` for a value that is no DaiFu decision."""
    kind = _row(decision)
    if kind is None:
        raise BadDecision(f"{decision!r} is not a DaiFu decision")
    return kind


def _row(value: Any) -> Kind | None:
    """The row of `value`'s class, or of the nearest decision class it derives from."""
    found = _BY_TYPE.get(type(value))
    if found is not None:  # a decision's own class: the common case, asked several times per crash
        return found
    return next((_BY_TYPE[cls] for cls in type(value).__mro__ if cls in _BY_TYPE), None)


def is_decision(value: Any) -> bool:
    """Whether `value` is one of DaiFu's decisions."""
    return _row(value) is not None


def play_name(decision: Decision) -> str:
    """The name `decision` is stored under (`Plays` for several plays: see `step_names`)."""
    return kind_of(decision).play


def step_names(decision: Decision) -> list[str]:
    """The play names of `decision`, one per step: the record writes a `Repairing...` line for each."""
    if isinstance(decision, Plays):
        return [play_name(step) for step in decision.steps]
    return [play_name(decision)]


def code_of(decision: Decision) -> str | None:
    """The code a decision carries: an action's statements, a surgery's or a patch's new source."""
    field = kind_of(decision).code
    return getattr(decision, field) if field else None  # type: ignore[no-any-return]


def target_of(decision: Decision) -> str | None:
    """The function a patch replaces (`module:qualname`); `None` for the other kinds."""
    field = kind_of(decision).target
    return getattr(decision, field) if field else None  # type: ignore[no-any-return]


def _made(kind: Kind, code: str | None, target: str | None) -> Decision:
    """A decision of `kind` carrying `code` and `target`, which it must have when it carries them."""
    values: dict[str, Any] = {}
    if kind.code:
        if not isinstance(code, str) or not code.strip():
            raise BadDecision(f"the {kind.play} play has no code")
        values[kind.code] = code
    if kind.target:
        if not isinstance(target, str) or not target:
            raise BadDecision(f"the {kind.play} play names no function to patch")
        values[kind.target] = target
    return kind.type(**values)  # type: ignore[no-any-return]


# -- the record: play names and their data (repairs.jsonl, replay, broadcast files, the distributed store)


def from_play(name: str, code: str | None, target: str | None = None, version: int = PLAYS_VERSION) -> Decision:
    """The decision stored as play `name` with `code` (surgery, action and patch need their code,
    a patch its `target`); `version` 1 reads `Pass` as a skip, as DaiFu wrote it then."""
    kind = _BY_PLAY.get(name)
    if kind is None or kind.type is Plays:
        known = ", ".join(kind.play for kind in KINDS if kind.type is not Plays)
        raise BadDecision(f"unknown play {name!r}; known: {known}")
    if kind.type is Pass and version == PLAYS_VERSION_1:
        return Skip()
    return _made(kind, code, target)


def to_data(decision: Decision) -> dict[str, Any]:
    """`decision` as JSON-ready data: `{"play": name, "code": code or None}` (and a patch's `target`,
    the `steps` of several plays)."""
    data: dict[str, Any] = {"play": play_name(decision), "code": code_of(decision)}
    if kind_of(decision).target:
        data["target"] = target_of(decision)
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


def to_row(decision: Decision | None) -> dict[str, Any]:
    """The fields of a `repairs.jsonl` entry that say what was decided (`None`: nothing was, `Raise`)."""
    data = to_data(decision if decision is not None else Raise())
    row = {"decision": data.pop("play"), "code": data.pop("code")}
    return {**row, **data, "plays_version": PLAYS_VERSION}


def from_row(row: dict[str, Any]) -> Decision:
    """The decision a `repairs.jsonl` entry records, read with the plays of the version it was written with."""
    data = {"play": row.get("decision"), **{key: row.get(key) for key in ("code", "target", "steps")}}
    return from_data(data, row.get("plays_version", PLAYS_VERSION_1))


# -- the repair bot's suggestion kinds, the approval page's choices, the console's words


def wire_kind(decision: Decision) -> str | None:
    """The repair bot's suggestion kind of `decision` (`None`: the bot never proposes it)."""
    return kind_of(decision).wire


def wire_kinds(carrying_code: bool | None = None) -> tuple[str, ...]:
    """The suggestion kinds the runtime carries out: all of them, or those that carry code (`True`) or not."""
    return tuple(w for w, kind in _BY_WIRE.items() if carrying_code is None or bool(kind.code) == carrying_code)


def from_wire(kind: str, code: str = "", target: str | None = None) -> Decision:
    """The decision carrying out a suggestion of `kind`; `BadDecision` for a kind DaiFu does not know,
    or a suggestion without the code (a patch without the target) its kind needs."""
    found = _BY_WIRE.get(kind)
    if found is None:
        raise BadDecision(f"unknown suggestion kind {kind!r}; known: {', '.join(_BY_WIRE)}")
    return _made(found, code, target)


def choice_of(decision: Decision) -> str | None:
    """The approval page's choice that takes `decision` by itself (`None`: none does)."""
    return kind_of(decision).choice


def choices() -> tuple[str, ...]:
    """The approval page's choices that take a decision by themselves (no suggestion, no code)."""
    return tuple(_BY_CHOICE)


def from_choice(choice: str) -> Decision:
    """The decision a choice of the approval page takes by itself; `BadDecision` for any other choice."""
    found = _BY_CHOICE.get(choice)
    if found is None:
        raise BadDecision(f"the choice {choice!r} takes no decision by itself; those that do: {', '.join(_BY_CHOICE)}")
    return _made(found, None, None)


def word_of(decision: Decision) -> str | None:
    """The console's word for `decision`'s kind."""
    return kind_of(decision).word


def words(carrying_code: bool | None = None) -> tuple[str, ...]:
    """The console's words, all of them, or those of kinds that carry code (`True`) or not (`False`)."""
    return tuple(w for w, kind in _BY_WORD.items() if carrying_code is None or bool(kind.code) == carrying_code)


def commands() -> dict[str, str]:
    """The console's commands that take a decision as it is, by word, with their help (in table order)."""
    return {kind.word: kind.command for kind in KINDS if kind.word and kind.command}


def from_word(word: str, code: str | None = None) -> Decision:
    """The decision the console's `word` takes, with `code` for a kind that carries it."""
    found = _BY_WORD.get(word)
    if found is None:
        raise BadDecision(f"unknown word {word!r}; known: {', '.join(_BY_WORD)}")
    return _made(found, code, None)
