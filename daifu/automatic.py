"""Automatic mode: turn the repair bot's suggestions into a decision, as `settings.approve` allows.

`approve="auto"` takes the best suggestion that is valid and stays inside the allowlisted language of
`daifu.allowlist` (any other needs a person, and the terminal says why each was passed over);
`"never"` only records them; `"ask"` hands them to `daifu.approval.approval_prompt` when a
person is at the terminal. A suggestion already tried on this crash is not offered again, so
when a repair did not hold, the next one is.
"""

from __future__ import annotations

import builtins
import json
import os
import re
import sys
import textwrap

from loguru import logger

from daifu.allowlist import check_suggestion, context_for
from daifu.botclient import BotAnswer, ask_bot
from daifu.config import Settings
from daifu.crash import Crash
from daifu.decisions import Action, Decision, Retry, Skip, Surgery
from daifu.redact import has_placeholder, restore_lines
from daifu.report import CrashReport, build_report, fingerprint, function_info
from daifu.suggestions import Verdict, check_action, check_surgery
from repairbot.protocol import Diagnosis, Suggestion

RECORD_NAME = "repairbot_suggestions.jsonl"


def decide(crash: Crash, settings: Settings) -> Decision | None:
    """The decision for `crash` in automatic mode, or `None` to let the runtime raise."""
    report = build_report(crash)
    answer = ask_bot(report, settings.bot_url)
    found = candidates(crash, answer.suggestions)
    context = context_for(crash)
    unattended = [check_suggestion(s, context, d.source if isinstance(d, Surgery) else None) for s, d, _ in found]
    _record(settings, report, answer, found, unattended)
    options = [(s, d, v) for s, d, v in found if v.ok]
    if settings.approve == "never":
        return None
    if settings.approve == "auto":
        chosen = _first_unattended(crash, found, unattended)
    else:
        shown = [s.model_copy(update={"code": d.source}) if isinstance(d, Surgery) else s for s, d, _ in options]
        chosen = _ask_person(crash, answer.diagnosis, shown)  # surgeries with their redacted lines put back
    if chosen is not None:
        _remember(crash, chosen)
    return chosen


def _first_unattended(
    crash: Crash, found: list[tuple[Suggestion, Decision, Verdict]], unattended: list[Verdict]
) -> Decision | None:
    """The best valid suggestion the allowlist admits; each valid one passed over is named on the terminal."""
    for number, ((suggestion, decision, valid), allowed) in enumerate(zip(found, unattended), 1):
        if not valid.ok:
            continue
        if allowed.ok:
            return decision
        logger.warning(
            "DaiFu did not apply the repair bot's suggestion {} ({}) for {} line {} automatically, because it "
            "needs a person (approve='ask'): {}",
            number,
            suggestion.kind,
            crash.qualname,
            crash.lineno,
            allowed,
        )
    return None


def candidates(crash: Crash, suggestions: list[Suggestion]) -> list[tuple[Suggestion, Decision, Verdict]]:
    """Each suggestion not tried yet, as a decision, with whether it is valid here."""
    tried = {decision for decision, _ in crash.tried}
    found = []
    for suggestion in suggestions:
        decision = restored(to_decision(suggestion), crash)
        if repr(decision) not in tried:
            found.append((suggestion, decision, validate(decision, crash)))
    return found


def restored(decision: Decision, crash: Crash) -> Decision:
    """A surgery with the lines the report showed redacted (`daifu.redact`) put back as they are in the source."""
    if isinstance(decision, Surgery) and has_placeholder(decision.source):
        return Surgery(restore_lines(decision.source, crash.source))
    return decision


def to_decision(suggestion: Suggestion) -> Decision:
    """The daifu decision carrying out `suggestion`."""
    if suggestion.kind == "surgery":
        return Surgery(suggestion.code)
    if suggestion.kind == "action":
        return Action(suggestion.code)
    if suggestion.kind == "patch_function":
        return Action(patch_action(suggestion.code, suggestion.target or ""))
    return Retry() if suggestion.kind == "retry" else Skip()


def patch_action(source: str, target: str) -> str:
    """Action code giving the function at `target` the code of `source`, in place.

    Swapping `__code__` keeps the function object, its globals and every reference to it (as
    jurigged does), and needs neither `exec` nor `compile` in the action.
    """
    source = textwrap.dedent(source)
    found = re.search(r"^(?:async\s+)?def\s+(\w+)", source, re.MULTILINE)
    if found is None:
        return source  # not a def: check_action and the safety check will say so
    temp = f"_daifu_patch_{found.group(1)}"
    body = source[found.start() : found.start(1)] + temp + source[found.end(1) :]  # decorators left out
    lines = [
        "import sys",
        body.rstrip(),
        f"_daifu_old = {target}",
        f"getattr(_daifu_old, '__func__', _daifu_old).__code__ = {temp}.__code__",
        f"del {temp}, _daifu_old",
    ]
    return "\n".join(lines)


def validate(decision: Decision, crash: Crash) -> Verdict:
    """Whether `decision` can be applied to `crash`: its code compiles, a surgery stays in its block,
    and the runtime (`crash.check`) has no objection. Code holding a redaction placeholder never is."""
    code = decision.source if isinstance(decision, Surgery) else decision.code if isinstance(decision, Action) else ""
    if has_placeholder(code):
        return Verdict(("it holds a `<redacted:...>` placeholder from the crash report where code should be",))
    if isinstance(decision, Surgery):
        verdict = check_surgery(decision.source, function_info(crash), names=visible_names(crash))
    elif isinstance(decision, Action):
        verdict = check_action(decision.code)
    else:
        verdict = Verdict()
    objection = crash.check(decision) if verdict.ok else None
    return Verdict((objection,)) if objection else verdict


def visible_names(crash: Crash) -> set[str] | None:
    """The names the crashed function can see, or `None` when its globals are unknown."""
    if crash.frame is None:
        return None
    return set(crash.locals) | set(crash.frame.f_globals) | set(dir(builtins))


def _ask_person(crash: Crash, diagnosis: Diagnosis, suggestions: list[Suggestion]) -> Decision | None:
    """`daifu.approval.approval_prompt`, when it exists and a person is at the terminal."""
    if not sys.stdin or not sys.stdin.isatty():
        return None
    try:
        from daifu.approval import approval_prompt
    except ImportError as error:
        if error.name != "daifu.approval":
            raise
        return None
    return approval_prompt(crash, diagnosis_text(diagnosis), suggestions)


def diagnosis_text(diagnosis: Diagnosis) -> str:
    """The diagnosis as a person reads it: category, culprit and explanation."""
    c = diagnosis.culprit
    return (
        f"[{diagnosis.category}] culprit: {c.function} ({c.filename}:{c.lineno}): {c.reason}\n{diagnosis.explanation}"
    )


def _remember(crash: Crash, decision: Decision) -> None:
    """Note the decision in `crash.tried`, so that if the crash comes back the next suggestion is taken."""
    text = repr(decision)
    if all(text != tried for tried, _ in crash.tried):
        crash.tried.append((text, "proposed by the repair bot"))


def _record(
    settings: Settings,
    report: CrashReport,
    answer: BotAnswer,
    found: list[tuple[Suggestion, Decision, Verdict]],
    unattended: list[Verdict],
) -> None:
    """Append the bot's answer to the workspace; a failure to write never costs the run."""
    entry = {
        "fingerprint": fingerprint(report),
        "function": report.function.qualname,
        "line": report.function.lineno,
        "exception": report.exception.type,
        "approve": settings.approve,
        "backend": answer.backend_used,
        "source": answer.source,
        "fallback_reason": answer.fallback_reason,
        "diagnosis": answer.diagnosis.model_dump(),
        "suggestions": [
            dict(s.model_dump(), valid=v.ok, reasons=list(v.reasons), unattended=u.ok, needs_person=list(u.reasons))
            for (s, _, v), u in zip(found, unattended)
        ],
        "report": report.model_dump(mode="json"),  # exactly what was sent: `daifu report` shows it
    }
    try:
        os.makedirs(settings.workspace, exist_ok=True)
        with open(os.path.join(settings.workspace, RECORD_NAME), "a", encoding="utf-8") as record:
            record.write(json.dumps(entry) + "\n")
    except OSError as error:
        logger.warning("Could not record the repair bot's suggestions in {}: {}", settings.workspace, error)
