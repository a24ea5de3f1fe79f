"""The repair bot's suggestions for a crash as ranked candidate decisions, each with what was found about it.

Each suggestion becomes the decision carrying it out (`daifu.core.kinds.from_wire`; a surgery's
redacted lines put back as they are); a suggestion already tried on this crash is not offered again.
Candidates are ordered by what they give up (`daifu.decide.giving_up`: a changed value first, then the
skip of a statement that only reports, rows of a batch, an iteration, a stale statement, trained state),
the bot's order kept among equals; a repair that passed its trial and was applied at the same site before comes first
(`with_experience`). What the verification stage (`daifu.decide.verify`) finds about each, its
problems, what keeps it from running unattended and its trial's verdict, stays with it: the approvers
and the record read it there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Protocol

from daifu.core.crash import Crash
from daifu.core.decisions import BadDecision, Decision, Raise, Surgery
from daifu.core.kinds import KINDS, code_of, from_row, from_wire, kind_of, play_name, target_of, wire_kind
from daifu.core.trial import Verdict
from daifu.decide import giving_up, same_shape
from daifu.decide.rerun_effects import rerun_effects
from daifu.decide.reruns import Rerun, reruns
from daifu.decide.verify import Verification, unverifiable
from daifu.report.redact import has_placeholder, restore_lines
from daifu.say import say_once
from daifu.state import RUN
from daifu.store import credit, repairs
from repairbot.protocol import Suggestion

MAX_SKIPS = 5
"""Automatic repairs at one site that skip work (a statement, an iteration), in one run, before no more are
applied: bad data is rare, and the same crash on batch after batch is a bug that skipping would hide."""
_SKIP_PLAYS = tuple(kind.play for kind in KINDS if kind.skips_work)


@dataclass
class Candidate:
    """One decision proposed for a crash, with what the verification stage found about it.

    decision: what it does (`Raise` for a suggestion that cannot be carried out at all: its `problems`
        say why). suggestion: the repair bot's suggestion it carries out (`None`: a person's own choice).
    verdict: its trial's verdict, once tried; trial_problems: why that trial fails it unattended
        although it passed (its own code reached an effect: `daifu.decide.trial_effects`).
    stage: the crash's verification stage. `problems` (why the runtime refuses it: it cannot be
        applied at all) and `unsafe` (why it may not be applied without a person) are worked out when
        first asked: the runtime's check builds and compiles the new version (tens of milliseconds a
        surgery), and `approve="auto"` asks only for the candidates it reaches, in rank order.
    """

    decision: Decision
    suggestion: Suggestion | None = None
    verdict: Verdict | None = None
    trial_problems: tuple[str, ...] = ()
    stage: Verification | None = field(default=None, repr=False)
    given_problems: tuple[str, ...] | None = None
    given_outside: tuple[str, ...] | None = None
    given_reruns: list[Rerun] | None = None
    given_level: int | None = None

    @property
    def problems(self) -> tuple[str, ...]:
        if self.given_problems is None:
            self.given_problems = self.stage.problems(self.decision) if self.stage is not None else ()
        return self.given_problems

    @property
    def outside_allowlist(self) -> tuple[str, ...]:
        """Why its code is outside the allowlist (then it does not run, even on a copy, without a person)."""
        if self.given_outside is None:
            self.given_outside = self.stage.outside_allowlist(self.decision) if self.stage is not None else ()
        return self.given_outside

    @property
    def reruns(self) -> list[Rerun]:
        """The statements it runs a second time: a surgery resuming above the crash (`daifu.decide.reruns`)."""
        if self.given_reruns is None:
            self.given_reruns = reruns(self.stage.crash, self.decision) if self.stage is not None else []
        return self.given_reruns

    @property
    def unsafe(self) -> tuple[str, ...]:
        """Why it may not be applied without a person: outside the allowlist, beyond a trial's sight, the
        statements it runs again do more than compute (`daifu.decide.rerun_effects`), or its own code
        reached an effect in its trial."""
        if self.stage is None:
            return self.outside_allowlist + self.trial_problems
        crash = self.stage.crash
        repeated = rerun_effects(self.reruns, crash.locals, crash.globals) if self.reruns else []
        again = (f"it resumes above the crash, and running those statements again may change more than they "
                 f"compute: {'; '.join(repeated)}",) if repeated else ()
        return self.outside_allowlist + unverifiable(self.decision, crash) + again + self.trial_problems

    def tried(self, verdict: Verdict) -> None:
        """Keep the verdict of its trial, and why it fails the candidate unattended when its own code
        reached an effect there (an effect only the program's code reached is the program's)."""
        self.verdict = verdict
        if self.stage is not None:
            problem = self.stage.repair_effect(self.decision, verdict)
            self.trial_problems = (problem,) if problem else ()

    @property
    def level(self) -> int:
        """What it gives up by its kind and its code, before any trial (`daifu.decide.giving_up`)."""
        if self.given_level is None:
            crash = self.stage.crash if self.stage is not None else None
            self.given_level = giving_up.static_level(self.decision, crash) if crash is not None else (
                giving_up.ITERATION if kind_of(self.decision).skips_work else giving_up.NOTHING)
        return self.given_level

    @property
    def given_up(self) -> giving_up.GivenUp:
        """What it gives up: as its trial measured it, once tried; else by its kind and code."""
        return giving_up.given_up(self.verdict, self.level)

    @property
    def checked(self) -> bool:
        """Whether the runtime's check has been made (the record says so for each suggestion)."""
        return self.given_problems is not None

    @property
    def kind(self) -> str:
        """The bot's kind of repair, or the play name of a decision no suggestion proposed."""
        if self.suggestion is not None:
            return self.suggestion.kind
        return wire_kind(self.decision) or play_name(self.decision)

    @property
    def code(self) -> str:
        """The code of the decision (a surgery's redacted lines restored), which the prompt shows and applies."""
        return code_of(self.decision) or (self.suggestion.code if self.suggestion is not None else "")

    @property
    def target(self) -> str | None:
        return target_of(self.decision) or (self.suggestion.target if self.suggestion is not None else None)

    @property
    def explanation(self) -> str:
        return self.suggestion.explanation if self.suggestion is not None else "chosen by a person"

    @property
    def confidence(self) -> float:
        return self.suggestion.confidence if self.suggestion is not None else 1.0

    @property
    def usable(self) -> bool:
        return not self.problems


class SuggestionLike(Protocol):
    """What `to_decision` reads of a suggestion (the protocol's, a candidate, or one a person edited)."""

    @property
    def kind(self) -> str: ...
    @property
    def code(self) -> str: ...


def to_decision(suggestion: SuggestionLike) -> Decision:
    """The decision carrying out `suggestion` (a patch's `target`, when it has one); `BadDecision` for a
    kind DaiFu does not know or a suggestion without the code its kind needs."""
    return from_wire(suggestion.kind, suggestion.code, getattr(suggestion, "target", None))


def candidates(stage: Verification, suggestions: list[Suggestion]) -> list[Candidate]:
    """Each suggestion not tried yet on this crash, as a decision, with what would stop it: the
    runtime's objection, a redaction placeholder left in its code, and (for running it without a
    person) every construct outside the allowlist (`daifu.decide.allowlist`)."""
    crash = stage.crash
    tried = {decision for decision, _ in crash.tried}
    found = []
    for suggestion in suggestions:
        try:
            decision = restored(to_decision(suggestion), crash)
        except BadDecision as bad:  # a surgery without code: shown and recorded, never applied
            found.append(Candidate(Raise(), suggestion, given_problems=(f"it cannot be carried out: {bad}",),
                                   given_outside=()))
            continue
        if repr(decision) not in tried:
            found.append(Candidate(decision, suggestion, stage=stage))
    return found


def restored(decision: Decision, crash: Crash) -> Decision:
    """A surgery with the lines the report showed redacted (`daifu.report.redact`) put back as they are."""
    if isinstance(decision, Surgery) and has_placeholder(decision.source):
        return Surgery(restore_lines(decision.source, crash.source))
    return decision


def rank(found: list[Candidate]) -> list[Candidate]:
    """The candidates by what they give up, least first (`daifu.decide.giving_up`), the bot's order kept
    among those that give up as much."""
    return sorted(found, key=lambda c: c.level)


def with_experience(stage: Verification, found: list[Candidate]) -> list[Candidate]:
    """`found`, with what worked before first, and skipping bounded.

    A repair the bot proposed, that passed its trial and was applied at the same function, file, line and
    exception type — in this run or an earlier one in the workspace's `repairs.jsonl` — is tried first
    (by trial, like any candidate), unless the same crash came back after it with no progress (a retry of
    a write into a folder that does not exist, taken on trust: it repaired nothing). One applied at a statement of the same shape elsewhere, for the same
    exception type, is offered renamed to this statement's names (`daifu.decide.same_shape`), first among
    the candidates that give up as much. A candidate that skips work is dropped once `MAX_SKIPS` automatic
    repairs at this site skipped work in this run.
    """
    crash = stage.crash
    site = (crash.qualname, crash.filename, crash.lineno, crash.exception_type)
    try:
        entries = list(reversed(repairs.load()))
    except (OSError, ValueError):
        entries = []
    failed = _followed_by_no_progress(entries)
    learned = None if crash.attempt > 1 else next(  # a repeat: what was applied here last made no progress
        (c for c in (_learned(e, site, stage, found) for e in entries if id(e) not in failed) if c is not None), None)
    similar = [_offered(stage, decision, why, found) for decision, why in same_shape.offered(crash, entries)]
    similar = [c for c in similar if c is not learned]
    rest = [c for c in found if c is not learned and all(c is not s for s in similar)]
    ordered = ([learned] if learned else []) + rank(similar + rest)
    if skips_exhausted(crash) and any(kind_of(c.decision).skips_work for c in ordered):
        say_once(f"{MAX_SKIPS} automatic repairs at {os.path.basename(crash.filename)}:{crash.lineno} skipped work; "
                 "no more are applied there without a person")
        ordered = [c for c in ordered if not kind_of(c.decision).skips_work]
    return ordered


def skips_exhausted(crash: Crash) -> bool:
    """Whether `MAX_SKIPS` automatic repairs at the crash's site skipped work in this run: no more may."""
    site = (crash.qualname, crash.filename, crash.lineno)
    skipped = sum(1 for r in RUN.history if (r.get("function"), r.get("file"), r.get("line")) == site
                  and credit.read(r)[0] == credit.AUTOMATIC and r.get("decision") in _SKIP_PLAYS)
    return skipped >= MAX_SKIPS


def _offered(stage: Verification, decision: Decision, why: str, found: list[Candidate]) -> Candidate:
    """The candidate carrying a remembered repair renamed for this crash: the bot's own, when it proposed the
    same; else a new one, said to come from the workspace's memory."""
    same = next((c for c in found if c.decision == decision), None)
    if same is not None:
        return same
    crash = stage.crash
    say_once(f"{crash.exception_type} at {os.path.basename(crash.filename)}:{crash.lineno}: offering {why}; "
             "it is tried like any other candidate")
    kind = wire_kind(decision) or "retry"
    suggestion = Suggestion(kind=kind, code=code_of(decision) or "", target=target_of(decision),  # type: ignore[arg-type]
                            confidence=0.9, explanation=why)
    return Candidate(decision, suggestion, stage=stage)


def _followed_by_no_progress(entries: list[dict[str, Any]]) -> set[int]:
    """The `id`s of the entries (newest first) after which the same crash came back in the same process
    before the run made any progress (the next repair there has `attempt` 2 or more)."""
    failed: set[int] = set()
    later: dict[tuple[Any, ...], dict[str, Any]] = {}
    for entry in entries:
        key = (entry.get("pid"), entry.get("function"), entry.get("file"), entry.get("line"), entry.get("exception_type"))
        after = later.get(key)
        if after is not None and isinstance(after.get("attempt"), int) and after["attempt"] >= 2:
            failed.add(id(entry))
        later[key] = entry
    return failed


def _learned(entry: dict[str, Any], site: tuple[Any, ...], stage: Verification,
             found: list[Candidate]) -> Candidate | None:
    """The candidate of a recorded repair at `site` that the bot proposed and its trial verified; else `None`."""
    if (entry.get("function"), entry.get("file"), entry.get("line"), entry.get("exception_type")) != site:
        return None
    if not same_shape.verified(entry):
        return None
    try:
        decision = from_row(entry)
    except BadDecision:
        return None
    kind = wire_kind(decision)
    if kind is None or (isinstance(decision, Surgery) and decision.source == stage.crash.source):
        return None  # not a repair the bot proposes, or the surgery that is the code running now
    same = next((c for c in found if c.decision == decision), None)
    if same is not None:
        return same
    suggestion = Suggestion(kind=kind, code=code_of(decision) or "", target=target_of(decision),  # type: ignore[arg-type]
                            confidence=1.0, explanation=f"it repaired this crash before (repair {entry.get('repair')})")
    return Candidate(decision, suggestion, stage=stage)
