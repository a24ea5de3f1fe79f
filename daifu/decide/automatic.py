"""Automatic mode: the repair bot's suggestions, verified, turned into a decision as `approve` allows.

The bot proposes; nothing it proposes touches the run before it is checked:

1. each suggestion becomes a candidate decision (`daifu.decide.candidates`), checked by the runtime's
   own validation (`daifu.decide.verify`); a suggestion already tried on this crash is not offered again;
2. candidates are ranked by what they give up (`daifu.decide.giving_up`), the bot's order kept among
   equals; a repair verified at the same site before comes first, and one verified at a statement of the
   same shape elsewhere is offered renamed (`daifu.decide.same_shape`); an action applied at the same site
   before is preceded by its fold into one surgery (`daifu.decide.fold`);
3. `approve="auto"`: each candidate, best first, whose code stays inside the allowlist of code that
   may run unattended, is tried on a sandboxed copy of the run (the verification stage's trial); the
   first whose trial is healthy and keeps the trained state is applied (unless its trial saw it give up
   work: then one after it that gives up less, if one passes). A candidate that fails its trial is
   never applied automatically, nor one whose own code reached an effect in its trial (the trial stops
   there; applied, the effect would be done for real) but those `daifu.decide.trial_effects` allows
   (the folder a failing write needs). Where no trial can run, only decisions that cannot discard trained
   state are applied (`cannot_discard`). A skip of a statement that assigns is never applied without a
   person: a trial cannot see what the stale value does to the result (`unverifiable`);
   `approve="ask"`: a person at the terminal chooses, seeing each candidate's trial verdict (the
   approval prompt, which the chain is handed: `daifu.decide.contract.Person`);
   `approve="never"`: the suggestions are recorded, and the crash raises;
   `approve="remote"`: a person decides on the repair bot service's approval page, seeing each
   candidate's trial verdict, while the process waits (`daifu.decide.remote`).

Every answer and every trial go to the workspace record; the terminal says what was decided. What an
automatic repair then passes over is held to the site's budget (`daifu.decide.watch`).
"""

from __future__ import annotations

import json
import os
from typing import Any

from daifu.core.crash import Crash
from daifu.core.decisions import Decision, Raise, Surgery
from daifu.core.handling import RepairContext
from daifu.core.kinds import code_of, play_name
from daifu.decide import watch
from daifu.decide.botclient import BotAnswer, ask_bot  # first: without the bot's packages, nothing more loads
from daifu.decide import repeat
from daifu.decide.by_person import person_decided, waiting
from daifu.decide.candidates import Candidate, candidates, rank, with_experience
from daifu.decide.contract import Person
from daifu.decide.failure import doing
from daifu.decide.fold import fold_repeated
from daifu.decide.reruns import describe as describe_reruns
from daifu.decide.same_shape import replacement
from daifu.decide.tried import tried_lines, where_the_rest_is
from daifu.decide.verify import Verification
from daifu.report.build import build_report
from daifu.report.redact import redact
from daifu.say import say, say_once
from daifu.store import record
from repairbot.protocol import CrashReport, Diagnosis, fingerprint

RECORD_NAME = "repairbot_suggestions.jsonl"


def decide(crash: Crash, context: RepairContext, person: Person | None) -> Decision | None:
    """The decision for `crash` in automatic mode, or `None` to let the crash go on down the chain.
    `person`: who approves with `approve="ask"` (`None`: nobody here may be asked)."""
    settings = context.settings
    watch.new_crash(crash)
    stage = Verification(crash, settings)
    unattended = settings.approve == "auto" and not watch.distrusted(crash)
    with doing("re-verifying the repair verified at this site by a short trial"):
        again = repeat.decide(stage, context) if unattended else None
    if again is not None:  # the same crash as one repaired here: the bot is not asked again
        context.watch = watch.start(crash, record.current_number(), again.decision, settings.pass_over)
        return _applied(stage, context, again)
    with doing("building the crash report"):
        report = build_report(crash)
    with doing("asking the repair bot"):
        answer = ask_bot(report, settings.bot_url, deadline=settings.bot_deadline)
    with doing("turning the bot's suggestions into candidate repairs"):
        found = fold_repeated(stage, with_experience(stage, rank(candidates(stage, answer.suggestions))))
    _say_diagnosis(crash, answer)
    chosen: Candidate | None = None
    if settings.approve == "auto" and watch.distrusted(crash):
        present = person is not None and person.present()
        say_once(f"automatic repairs at {os.path.basename(crash.filename)}:{crash.lineno} stopped earlier in this run "
                 "(said above): "
                 "asking a person" + ("" if present else " (none at a terminal: the crash raises)"))
        chosen = _ask_person(stage, context, person, answer.diagnosis, found)
    elif settings.approve == "auto":
        chosen = _automatic(stage, context, found)
    elif settings.approve == "ask":
        chosen = _ask_person(stage, context, person, answer.diagnosis, found)
    elif settings.approve == "remote":
        from daifu.decide import remote  # a person decides in a browser; the process waits

        chosen = remote.decide(stage, context, report, answer, found, lambda: _automatic(stage, context, found))
    with doing("recording the bot's answer"):
        record_answer(context, report, answer, found)
    if unattended:
        _say_tried(stage, found, chosen)
    if chosen is None:
        if settings.approve == "never":
            say(f"{len(found)} suggestion(s) recorded; approve='never' applies none")
        return None
    if isinstance(chosen.decision, Raise):  # a person rejected the repair
        return chosen.decision
    if unattended:
        repeat.remember(crash, chosen, context.entry.number)
    return _applied(stage, context, chosen)


def _applied(stage: Verification, context: RepairContext, chosen: Candidate) -> Decision:
    """The decision of `chosen`, which is applied: what the record and the terminal say of it."""
    if chosen.verdict is not None:
        context.entry.extra["trial"] = chosen.verdict.describe()
    replaced = replacement(stage.crash, chosen.decision) if isinstance(chosen.decision, Surgery) else None
    if replaced is not None:  # what a statement of the same shape elsewhere may be offered (`same_shape`)
        context.entry.extra["replaced_by"] = replaced
    if chosen.reruns:
        context.entry.extra["reruns"] = [r.describe() for r in chosen.reruns]
        say(f"repair at {os.path.basename(stage.crash.filename)}:{stage.crash.lineno}: "
            f"{describe_reruns(chosen.reruns)}")
    context.note_tried(chosen.decision, "proposed by the repair bot", once=True)  # if the crash comes back,
    return chosen.decision  # the next suggestion is taken


def _automatic(stage: Verification, context: RepairContext, found: list[Candidate]) -> Candidate | None:
    """The verified candidate applied without a person, and the watch of the iterations after it."""
    chosen = stage.first_passing(found, context)
    if chosen is not None:
        context.watch = watch.start(stage.crash, record.current_number(), chosen.decision, context.settings.pass_over)
    return chosen


def _ask_person(stage: Verification, context: RepairContext, person: Person | None, diagnosis: Diagnosis,
                found: list[Candidate]) -> Candidate | None:
    """The candidate a person at the terminal applies (each shown with its trial verdict)."""
    if person is None or not person.present():
        return None
    options = stage.for_a_person(found)
    context.shown.extend(c.decision for c in options if c.suggestion is not None)
    with waiting(context):
        decision = person.approve(stage.crash, context, diagnosis_text(diagnosis), options)
    if decision is None:
        return None
    person_decided(context, decision, "approval prompt")
    return next((c for c in options if c.decision == decision), Candidate(decision))


def diagnosis_text(diagnosis: Diagnosis) -> str:
    """The diagnosis as a person reads it: category, culprit and explanation."""
    c = diagnosis.culprit
    return (
        f"[{diagnosis.category}] culprit: {c.function} ({c.filename}:{c.lineno}): {c.reason}\n{diagnosis.explanation}"
    )


# -- what the terminal and the record say --------------------------------------------------------


def _say_diagnosis(crash: Crash, answer: BotAnswer) -> None:
    where = f"{os.path.basename(crash.filename)}:{crash.lineno}"
    who = answer.backend_used + ("" if answer.source == "in-process" else f" at {answer.source}")
    first = answer.diagnosis.explanation.strip().splitlines()[0] if answer.diagnosis.explanation.strip() else ""
    say(f"{crash.exception_type} at {where}: repair bot ({who}): [{answer.diagnosis.category}] {first[:160]}")
    if answer.fallback_reason:
        say(f"  (the repair bot fell back: {answer.fallback_reason[:200]})")


def _say_tried(stage: Verification, found: list[Candidate], applied: Candidate | None) -> None:
    """One line per candidate refused (before `applied`, or all when none was), and where the rest is."""
    lines = tried_lines(found, stage.crash.source, applied)
    for line in lines:
        say(line)
    if lines:
        say(where_the_rest_is(stage.settings, RECORD_NAME))


def record_answer(context: RepairContext, report: CrashReport, answer: BotAnswer, found: list[Candidate]) -> None:
    """Append the bot's answer, every trial, and the model call behind the answer (if any) to the
    workspace; a failure to write never costs the run."""
    settings = context.settings
    trials = [  # what a trial printed is the program's output: redacted like everything else written here
        {"decision": play_name(c.decision), "code": code_of(c.decision), **c.verdict.to_data(),
         "output": redact(c.verdict.output)}
        for c in found
        if c.verdict is not None
    ]
    if trials:
        context.entry.extra["trials"] = [
            {"decision": t["decision"], "verdict": t["outcome"], "ms": round(t["seconds"] * 1000, 1)} for t in trials
        ]
    entry = {
        "repair": record.current_number(),
        "pid": os.getpid(),
        "fingerprint": fingerprint(report),
        "function": report.function.qualname,
        "line": report.function.lineno,
        "exception": report.exception.type,
        "approve": settings.approve,
        "backend": answer.backend_used,
        "source": answer.source,
        "fallback_reason": answer.fallback_reason,
        "diagnosis": answer.diagnosis.model_dump(),
        "suggestions": [_suggestion_row(c) for c in found],
        "trials": trials,
        "report": report.model_dump(mode="json"),  # exactly what was sent: `daifu report` shows it
        "answer": answer.answer,
        "transcript": answer.transcript.model_dump(mode="json") if answer.transcript else None,
    }
    try:
        os.makedirs(settings.workspace, exist_ok=True)
        with open(os.path.join(settings.workspace, RECORD_NAME), "a", encoding="utf-8") as stream:
            stream.write(json.dumps(entry, default=str) + "\n")
    except OSError as error:
        say(f"could not record the repair bot's suggestions in {settings.workspace}: {error}")



def _suggestion_row(candidate: Candidate) -> dict[str, Any]:
    """A suggestion as the record keeps it, with what the checks found (`checked: False`: never reached)."""
    c = candidate
    data = c.suggestion.model_dump() if c.suggestion is not None else {"kind": c.kind, "code": c.code}
    if not c.checked:
        return {**data, "checked": False}
    return {**data, "valid": c.usable, "reasons": list(c.problems), "unattended": not c.unsafe,
            "needs_person": list(c.unsafe), "reruns": [r.describe() for r in c.reruns]}
