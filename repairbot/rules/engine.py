"""The offline engine: the message rules, and the candidate edits generated from the crash, ranked together.

The first rule that recognizes the crash's message diagnoses it and proposes repairs. Rules go from
the most specific message to the most general, so an out-of-memory error that mentions a timeout is
treated as out of memory, not as transient. The rules' suggestions are one source of candidates;
`repairbot.generate` adds the small typed edits the statement and the live values' facts allow,
whatever the message, and `repairbot.generate.rank` orders them all for the client's trials.
"""

from __future__ import annotations

from repairbot.bounds import bounded_report, cut
from repairbot.generate import CATEGORIES, generate
from repairbot.generate.candidate import GeneratedRepair
from repairbot.generate.rank import from_rules, ranked, suggestions
from repairbot.protocol import CATEGORIES as KNOWN_CATEGORIES
from repairbot.protocol import CrashReport, Diagnosis, Suggestion
from repairbot.rules import api_misuse, data, memory, mismatch, paths, transient
from repairbot.rules.context import ReportView, Finding

_SHOWN_FRAMES = 3
"""Frames named at each end of the traceback's explanation; a deep recursion does not make it long."""

RULES = memory.RULES + paths.RULES + api_misuse.RULES + mismatch.RULES + data.RULES + transient.RULES


def analyse(report: CrashReport) -> tuple[Diagnosis, list[Suggestion]]:
    """The diagnosis of `report` and the repairs proposed, best first (possibly none).

    The rules see `report` through `bounded_report`, so the work done is bounded whatever its size.
    """
    ctx = ReportView(bounded_report(report))
    finding = next((f for f in (rule(ctx) for rule in RULES) if f is not None), None) or _unknown(ctx)
    generated, places = generate(ctx.report)
    kept = ranked(generated + [from_rules(s) for s in finding.suggestions], places)  # on a tie, the generated edit
    if finding.category == "unknown" and any(c.family != "rules" for c in kept):
        finding = _generated(kept, ctx)
    return Diagnosis(
        category=finding.category,
        culprit=ctx.culprit(_reason(ctx)),
        explanation=f"{finding.explanation}\n{explain_traceback(ctx)}",
    ), suggestions(kept)


def _generated(kept: list[GeneratedRepair], ctx: ReportView) -> Finding:
    """The diagnosis when no rule knows the message: the category of the best generated candidate."""
    best = next(c for c in kept if c.family != "rules")
    return Finding(
        CATEGORIES.get(best.family) or (best.family if best.family in KNOWN_CATEGORIES else "unknown"),
        f"No rule knows this {ctx.report.exception.type}; {len(kept)} candidate edit(s) were generated from the "
        "faulty statement and the live values' facts, best first, to be tried in turn.",
        [],
    )


def _unknown(ctx: ReportView) -> Finding:
    return Finding("unknown", f"No known pattern matches {ctx.report.exception.type}; inspect the frames below.", [])


def _reason(ctx: ReportView) -> str:
    if ctx.at_function:
        return "The faulty statement is in the vaccinated function itself" + (
            ", and the exception came from library code it called." if len(ctx.report.frames) > 1 else "."
        )
    return (
        f"{ctx.site.qualname} is the deepest user code on the stack; the frames below it are library code "
        "that did what it was asked."
    )


def explain_traceback(ctx: ReportView) -> str:
    """The traceback in plain words: the user's frames, then where inside the library it was raised."""
    frames, e = ctx.report.frames, ctx.report.exception
    shown = [f for f in frames if not f.library]
    if frames and frames[-1].library:
        shown.append(frames[-1])
    steps = [
        f"`{f.code}` in {f.function} ({'library' if f.library else 'your code'}, {f.filename}:{f.lineno})"
        for f in shown
    ]
    if len(steps) > 2 * _SHOWN_FRAMES:
        left_out = f"{len(steps) - 2 * _SHOWN_FRAMES} more frames of your code"
        steps = steps[:_SHOWN_FRAMES] + [left_out] + steps[-_SHOWN_FRAMES:]
    path = " called ... ".join(steps) if steps else "the faulty statement"
    first = cut(e.message.splitlines()[0], 300) if e.message.strip() else "(no message)"
    return f"Traceback: {path}; it raised {e.type}: {first}"
