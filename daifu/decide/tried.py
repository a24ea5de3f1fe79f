"""What automatic mode says it tried, when the repair bot's suggestions were not applied as they came.

`approve="auto"` tries the candidates best first (`daifu.decide.verify.Verification.first_passing`); a
person reading the terminal should not have to open the record to learn that two edits were tried and
why each was refused. When none is applied, the terminal gets one line per candidate reached: its kind,
its edit in short and what stopped it (the runtime's check, the allowlist, its trial's verdict), the
first `SHOWN` of them, then how many more; the last line names where the rest is (`daifu report N`,
the suggestions record). When one is applied, the candidates refused before it are said the same way.
"""

from __future__ import annotations

from daifu.config import Settings
from daifu.decide.candidates import Candidate
from daifu.store import repairs
from daifu.store.record import code_in_short

SHOWN = 5
"""Candidates said one per line; the others are counted (`and 3 more`)."""

LINE = 260
"""Characters of a candidate's line at most: a verdict can be long; the record keeps it whole."""


def tried_lines(found: list[Candidate], running: str, applied: Candidate | None = None) -> list[str]:
    """The terminal's lines for the candidates reached before `applied` (all of them when `None`): a
    heading, one line each for the first `SHOWN`, then how many more; `[]` when none was refused."""
    reached = [c for c in _before(found, applied) if fate(c) is not None]
    if not reached:
        return []
    count = f"{len(reached)} suggestion{'s' if len(reached) > 1 else ''} of the repair bot"
    heading = f"tried {count}, none applied:" if applied is None else f"refused {count} before the one applied:"
    lines = [heading]
    for number, candidate in enumerate(reached[:SHOWN], 1):
        code = code_in_short(candidate.decision, running)
        line = f"  {number}. {candidate.kind}{f' `{code}`' if code else ''}: {fate(candidate)}"
        lines.append(line if len(line) <= LINE else line[: LINE - 1] + "…")
    if len(reached) > SHOWN:
        lines.append(f"  and {len(reached) - SHOWN} more")
    return lines


def fate(candidate: Candidate) -> str | None:
    """What stopped `candidate`, in one line; `None` when automatic mode never reached it."""
    c = candidate
    if not c.checked:
        return None
    if c.problems:
        return f"refused by the runtime's check: {c.problems[0]}"
    if c.verdict is None:
        unsafe = c.unsafe
        return f"needs a person: {unsafe[0]}" if unsafe else "not tried: the limit of trials was reached"
    said = c.verdict.describe(conclusion_first=True)
    if c.verdict.passed and not c.trial_problems:  # passed, but a later one gave up less (`first_passing`)
        return f"passed, but gave up more than the one applied: {said}"
    return f"{said}; needs a person: {c.trial_problems[0]}" if c.trial_problems else said


def where_the_rest_is(settings: Settings, suggestions_file: str) -> str:
    """The line that names where the rest is: `daifu report N` (N as `daifu show` numbers this repair,
    whose record line comes next) and the suggestions record."""
    try:
        number = len(repairs.all_repairs(settings.workspace)) + 1
    except (OSError, ValueError):  # an unreadable record: the report of the last repair is this one
        number = 0
    record = "" if settings.workspace == Settings.workspace else f" --record {settings.workspace}"
    report = f"daifu report{record}{f' {number}' if number else ''}"
    return f"the rest (each check, each whole trial): {report}, or {settings.workspace / suggestions_file}"


def _before(found: list[Candidate], applied: Candidate | None) -> list[Candidate]:
    at = next((n for n, c in enumerate(found) if c is applied), len(found))
    return found[:at]
