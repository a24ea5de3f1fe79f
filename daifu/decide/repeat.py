"""The same crash again at a site whose automatic repair was verified there: that repair, re-verified by a short trial.

At the first crash of a site automatic mode asks the repair bot, checks each suggestion and tries it on a
copy of the run over the horizon (`daifu.decide.automatic`). When the crash comes back at that site later
in the run with the same facts — the same running version of the function, the same exception type and
message shape (its numbers aside), the same operands (type, shape and dtype of each value the statement
names) — the repair verified there is offered again without asking the bot. It goes through the same
stage as any candidate (the runtime's dry run, the allowlist) and a short trial: the crashed iteration
only, in process when the state to put back is small (`SHORT_IN_PROCESS_BYTES`, where the `trials`
setting is `auto`), else in a forked copy. It is applied only when that trial passes and gives up no more
than the full trial did; what it passes over is counted against the site's budget as any automatic
repair's, and the iterations after it are watched.

The full path runs instead, and the terminal says why, when the facts differ, when the repair no longer
passes its checks, when its short trial fails (then it is noted as tried on this crash and forgotten), when
it was tried on this crash already, and for an action the bot's path would fold into one surgery
(`daifu.decide.fold`). The terminal says which check ran.
"""

from __future__ import annotations

import ast
import os
import re
import sys
import textwrap
from dataclasses import dataclass
from typing import Any

from daifu.core.crash import Crash
from daifu.core.decisions import Decision
from daifu.core.handling import RepairContext
from daifu.core.kinds import kind_of
from daifu.core.trial import IN_PROCESS, Outcome
from daifu.decide.candidates import Candidate, skips_exhausted
from daifu.decide.fold import fold_repeated
from daifu.decide.giving_up import GivenUp
from daifu.decide.verify import Verification, sleep_seconds
from daifu.say import say
from daifu.state import RUN
from repairbot.protocol import Suggestion

SHORT_IN_PROCESS_BYTES = 64 * 1024 * 1024
"""State a short trial copies and puts back in process, at most; a larger one is tried in a forked copy."""
_NAME = re.compile(r"[A-Za-z_]\w*")
_NUMBER = re.compile(r"0x[0-9a-fA-F]+|\d+")


@dataclass(frozen=True)
class Facts:
    """What two crashes at one site must share for the repair verified at the first to be re-verified
    at the second by a short trial."""

    source: str
    exception: str
    message: str
    operands: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Verified:
    """The automatic repair a full trial verified at a site: the crash's facts, the decision and the
    suggestion it carried out, its repair number, and what it gave up in that trial."""

    facts: Facts
    decision: Decision
    suggestion: Suggestion | None
    number: int
    given_up: GivenUp


def facts(crash: Crash) -> Facts:
    """The facts of `crash` a repeat must share (`Facts`)."""
    error = type(crash.exception)
    return Facts(crash.source, f"{error.__module__}.{error.__qualname__}", _NUMBER.sub("#", crash.message),
                 _operands(crash))


def _operands(crash: Crash) -> tuple[tuple[str, str], ...]:
    """Each name the faulty statement reads that the frame binds, with its value's type, and the shape and
    dtype of a tensor or an array (read from them only: no code of the program's runs)."""
    kinds: tuple[Any, ...] = tuple(kind for kind in (getattr(sys.modules.get("torch"), "Tensor", None),
                                    getattr(sys.modules.get("numpy"), "ndarray", None)) if isinstance(kind, type))
    found = []
    for name in _read_names(crash.statement):
        value: Any = crash.locals[name] if name in crash.locals else crash.globals.get(name, _Absent)
        if value is _Absent:
            continue
        what = type(value).__qualname__
        if isinstance(value, kinds):
            what += f" {tuple(value.shape)} {value.dtype}"
        found.append((name, what))
    return tuple(found)


def _read_names(statement: str) -> list[str]:
    """The names `statement` reads (a compound statement's header: its test, iterable, managers), sorted;
    every name it holds when it does not parse."""
    text = textwrap.dedent(statement).rstrip()
    try:
        tree = ast.parse(text + "\n    pass" if text.endswith(":") else text)
    except SyntaxError:
        return sorted(set(_NAME.findall(statement)))
    return sorted({node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)})


class _Absent:
    """A name the frame does not bind (a keyword, an attribute's name)."""


def remember(crash: Crash, chosen: Candidate, number: int) -> None:
    """Note the repair `chosen` for `crash`, applied as repair `number` without a person, when its full
    trial passed: a repeat of the same crash at this site re-verifies it by a short trial."""
    verdict = chosen.verdict
    if verdict is None or not verdict.passed or chosen.trial_problems or verdict.outcome is Outcome.UNAVAILABLE:
        return
    RUN.verified[crash.site] = Verified(facts(crash), chosen.decision, chosen.suggestion, number, chosen.given_up)


def decide(stage: Verification, context: RepairContext) -> Candidate | None:
    """The repair verified at this crash's site, re-verified by a short trial, when the crash has the same
    facts; `None`: the full path decides (the terminal says why, when a repair was verified here)."""
    crash = stage.crash
    known: Verified | None = RUN.verified.get(crash.site)
    if known is None or any(text == repr(known.decision) for text, _ in crash.tried):
        return None
    where = f"{crash.exception_type} at {os.path.basename(crash.filename)}:{crash.lineno}"
    repair = f"repair {known.number}'s {kind_of(known.decision).play}"
    differ = _differences(known.facts, facts(crash))
    if differ:
        say(f"{where} again, but its {differ} differ from repair {known.number}'s crash: the full check runs")
        return None
    candidate = Candidate(known.decision, known.suggestion, stage=stage)
    refused = candidate.problems or candidate.unsafe
    if refused or (kind_of(known.decision).skips_work and skips_exhausted(crash)):
        why = refused[0] if refused else "automatic repairs that skip work stopped at this site"
        say(f"{where} again: {repair} no longer passes its checks ({why}): the full check runs")
        RUN.verified.pop(crash.site, None)
        return None
    if len(fold_repeated(stage, [candidate])) > 1:
        return None  # the bot's path offers the action folded into one surgery first
    verdict = crash.trial(known.decision, stage.settings.trial_seconds + sleep_seconds(known.decision), horizon=0,
                          in_process_up_to=SHORT_IN_PROCESS_BYTES)
    candidate.tried(verdict)
    if verdict.outcome is Outcome.UNAVAILABLE:
        return None
    if verdict.passed and not candidate.trial_problems and candidate.given_up[0] <= known.given_up[0]:
        how = "in process" if verdict.kind == IN_PROCESS else "in a forked copy"
        context.entry.extra["repeat_of"] = known.number  # the repair whose full trial verified it
        context.entry.extra["trials"] = [{"decision": kind_of(known.decision).play, "verdict": verdict.outcome.value,
                                          "ms": round(verdict.seconds * 1000, 1), "horizon": 0}]
        say(f"{where} again, with the same code, exception, message shape and operands: {repair}, verified over "
            f"the horizon, re-verified by a short trial (the crashed iteration only, {how}); the bot was not asked")
        return candidate
    why = candidate.trial_problems[0] if candidate.trial_problems else (
        verdict.describe() if not verdict.passed else "it gave up more than in its full trial")
    context.note_tried(known.decision, f"refused by its short trial: {why}")
    say(f"{where} again: {repair} failed its short trial ({why}): the full check runs")
    RUN.verified.pop(crash.site, None)
    return None


def _differences(before: Facts, now: Facts) -> str:
    """The facts that differ, in words (`""`: none)."""
    names = {"source": "function's code", "exception": "exception type", "message": "message shape",
             "operands": "operands"}
    return ", ".join(text for name, text in names.items() if getattr(before, name) != getattr(now, name))
