"""Automatic mode: the repair bot's suggestions, verified, turned into a decision as `approve` allows.

The bot proposes; nothing it proposes touches the run before it is checked:

1. each suggestion becomes a candidate decision, checked by the runtime's own validation
   (`crash.check`); a suggestion already tried on this crash is not offered again;
2. candidates are ranked as the bot ranked them, except that those which skip work (a skipped
   statement or iteration) come last;
3. `approve="auto"`: each candidate, best first, whose code stays inside the allowlist of code that
   may run unattended, is tried on a sandboxed copy of the run (`crash.trial`); the first whose
   trial is healthy and keeps the trained state is applied. A candidate that fails its trial is
   never applied automatically, nor one whose own code reached an effect in its trial (the trial
   stops there; applied, the effect would be done for real) but those `daifu.decide.trial_effects`
   allows (the folder a failing write needs). Where no trial can run, only decisions that cannot discard trained
   state are applied (`cannot_discard`). A skip of a statement that assigns is never applied without a
   person: a trial cannot see what the stale value does to the result (`unverifiable`);
   `approve="ask"`: a person at the terminal chooses, seeing each candidate's trial verdict;
   `approve="never"`: the suggestions are recorded, and the crash raises;
   `approve="remote"`: a person decides on the repair bot service's approval page, seeing each
   candidate's trial verdict, while the process waits (`daifu.decide.remote`).

Every answer and every trial go to the workspace record; the terminal says what was decided.
"""

from __future__ import annotations

import ast
import json
import os
import sys
import textwrap
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from daifu.config import Settings
from daifu.core.crash import Crash
from daifu.core.decisions import (
    Action,
    BadDecision,
    Decision,
    Patch,
    Raise,
    Retry,
    Skip,
    SkipIteration,
    Surgery,
    code_of,
    from_play,
    play_name,
)
from daifu.core.trial import Outcome, Verdict
from daifu.decide.botclient import BotAnswer, ask_bot
from daifu.decide import watch
from daifu.decide.allowlist import check_suggestion, context_for
from daifu.decide.failure import doing
from daifu.decide.trial_effects import repair_effect
from daifu.report.build import build_report
from daifu.report.redact import has_placeholder, redact, restore_lines
from daifu.say import say, say_once
from daifu.state import RUN
from daifu.store import record, repairs
from repairbot.protocol import CrashReport, Diagnosis, Suggestion, fingerprint

RECORD_NAME = "repairbot_suggestions.jsonl"
_SKIPPING = (Skip, SkipIteration)


@dataclass
class Candidate:
    """One suggestion as a decision, with what is known about it.

    problems: why the runtime would refuse it (it cannot be applied at all).
    unsafe: why it may not be applied without a person: its code is outside the allowlist
        (`outside_allowlist`), its effect is one a trial cannot see (`unverifiable`), or its own code
        reached an effect in its trial (`trial_problems`, `daifu.decide.trial_effects`).
    verdict: its trial's verdict, once tried.

    With a `crash`, `problems` and `unsafe` are worked out when first asked: the runtime's check builds
    and compiles the new version (tens of milliseconds a surgery), and `approve="auto"` asks only for
    the candidates it reaches, in rank order.
    """

    suggestion: Suggestion
    decision: Decision
    given_problems: tuple[str, ...] | None = None
    given_outside: tuple[str, ...] | None = None
    verdict: Verdict | None = None
    trial_problems: tuple[str, ...] = ()
    crash: Crash | None = field(default=None, repr=False)
    shared: dict[str, Any] = field(default_factory=dict, repr=False)
    """What the candidates of one crash share once worked out (the allowlist's context of the frame)."""

    @property
    def problems(self) -> tuple[str, ...]:
        if self.given_problems is None:
            self.given_problems = _problems(self.crash, self.decision) if self.crash is not None else ()
        return self.given_problems

    @property
    def outside_allowlist(self) -> tuple[str, ...]:
        """Why its code is outside the allowlist (then it does not run, even on a copy, without a person)."""
        if self.given_outside is None:
            found: tuple[str, ...] = ()
            if self.crash is not None:
                if "context" not in self.shared:
                    self.shared["context"] = context_for(self.crash)
                code = code_of(self.decision) or ""
                found = tuple(check_suggestion(self.suggestion, self.shared["context"], code).reasons)
            self.given_outside = found
        return self.given_outside

    @property
    def unsafe(self) -> tuple[str, ...]:
        if self.crash is None:
            return self.outside_allowlist + self.trial_problems
        return self.outside_allowlist + unverifiable(self.decision, self.crash) + self.trial_problems

    def tried(self, verdict: Verdict) -> None:
        """Keep the verdict of its trial, and why it fails the candidate unattended when its own code
        reached an effect there (an effect only the program's code reached is the program's)."""
        self.verdict = verdict
        if self.crash is not None:
            problem = repair_effect(self.decision, verdict, self.crash, self.shared.get("context"))
            self.trial_problems = (problem,) if problem else ()

    @property
    def checked(self) -> bool:
        """Whether the runtime's check has been made (the record says so for each suggestion)."""
        return self.given_problems is not None

    @property
    def kind(self) -> str:
        return self.suggestion.kind

    @property
    def code(self) -> str:
        """The code of the decision (a surgery's redacted lines restored), which the prompt shows and applies."""
        return code_of(self.decision) or self.suggestion.code

    @property
    def target(self) -> str | None:
        return self.decision.target if isinstance(self.decision, Patch) else self.suggestion.target

    @property
    def explanation(self) -> str:
        return self.suggestion.explanation

    @property
    def confidence(self) -> float:
        return self.suggestion.confidence

    @property
    def usable(self) -> bool:
        return not self.problems


def decide(crash: Crash, settings: Settings) -> Decision | None:
    """The decision for `crash` in automatic mode, or `None` to let the crash go on down the chain."""
    watch.new_crash(crash)
    with doing("building the crash report"):
        report = build_report(crash)
    with doing("asking the repair bot"):
        answer = ask_bot(report, settings.bot_url, deadline=settings.bot_deadline)
    with doing("turning the bot's suggestions into candidate repairs"):
        found = from_experience(crash, rank(candidates(crash, answer.suggestions)))
    _say_diagnosis(crash, answer)
    chosen: Candidate | None = None
    if settings.approve == "auto" and watch.distrusted(crash):
        say_once(f"automatic repairs at {os.path.basename(crash.filename)}:{crash.lineno} stopped after one did harm; "
                 "asking a person" + ("" if _person_present() else " (none at a terminal: the crash raises)"))
        chosen = _ask_person(crash, answer.diagnosis, found, settings)
    elif settings.approve == "auto":
        chosen = _automatic(crash, found, settings)
    elif settings.approve == "ask":
        chosen = _ask_person(crash, answer.diagnosis, found, settings)
    elif settings.approve == "remote":
        from daifu.decide import remote  # a person decides in a browser; the process waits

        chosen = remote.decide(crash, report, answer, found, settings, lambda: _automatic(crash, found, settings))
    with doing("recording the bot's answer"):
        record_answer(settings, report, answer, found, crash)
    if chosen is None:
        if settings.approve == "never":
            say(f"{len(found)} suggestion(s) recorded; approve='never' applies none")
        return None
    if isinstance(chosen.decision, Raise):  # a person rejected the repair
        return chosen.decision
    if chosen.verdict is not None and crash.entry is not None:
        crash.entry.extra["trial"] = chosen.verdict.describe()
    _remember(crash, chosen.decision)
    return chosen.decision


def candidates(crash: Crash, suggestions: list[Suggestion]) -> list[Candidate]:
    """Each suggestion not tried yet on this crash, as a decision, with what would stop it: the
    runtime's objection, a redaction placeholder left in its code, and (for running it without a
    person) every construct outside the allowlist (`daifu.decide.allowlist`)."""
    tried = {decision for decision, _ in crash.tried}
    shared: dict[str, Any] = {}
    found = []
    for suggestion in suggestions:
        decision = restored(to_decision(suggestion), crash)
        if repr(decision) not in tried:
            found.append(Candidate(suggestion, decision, crash=crash, shared=shared))
    return found


def _problems(crash: Crash, decision: Decision) -> tuple[str, ...]:
    if has_placeholder(code_of(decision) or ""):
        return ("it holds a `<redacted:...>` placeholder from the crash report where code should be",)
    problem = crash.check(decision)
    return (problem,) if problem else ()


MAX_SKIPS = 5
"""Automatic repairs at one site that skip work (a statement, an iteration), in one run, before no more are
applied: bad data is rare, and the same crash on batch after batch is a bug that skipping would hide."""
_KINDS = {"Surgery": "surgery", "Action": "action", "Retry": "retry", "Pass": "retry", "Skip": "skip",
          "SkipIteration": "skip_iteration"}
"""The protocol's suggestion kind of each play name a record holds (`Pass` is the prototype's name for a retry)."""
_SKIP_PLAYS = ("Skip", "SkipIteration")


def from_experience(crash: Crash, found: list[Candidate]) -> list[Candidate]:
    """`found`, with what worked before at this crash's fingerprint first, and skipping bounded.

    A repair the bot proposed, that passed its trial and was applied at the same function, file, line and
    exception type — in this run or an earlier one in the workspace's `repairs.jsonl` — is tried first
    (by trial, like any candidate). A candidate that skips work is dropped once `MAX_SKIPS` automatic
    repairs at this site skipped work in this run.
    """
    site = (crash.qualname, crash.filename, crash.lineno, crash.exception_type)
    try:
        entries = list(reversed(repairs.load()))
    except (OSError, ValueError):
        entries = []
    learned: Candidate | None = None
    for entry in entries:
        if (entry.get("function"), entry.get("file"), entry.get("line"), entry.get("exception_type")) != site:
            continue
        play, code = entry.get("decision"), entry.get("code")
        verified = any(isinstance(t, dict) and t.get("decision") == play and t.get("verdict") in (
            Outcome.COMPLETED.value, Outcome.STOPPED_AT_EFFECT.value) for t in entry.get("trials") or [])
        if entry.get("decided_by") != "bot" or not verified or play not in _KINDS or entry.get("duration_ms") is None:
            continue
        try:
            decision = from_play(str(play), code)
        except BadDecision:
            continue
        if isinstance(decision, Surgery) and decision.source == crash.source:
            continue  # that surgery is the code running now
        same = next((c for c in found if c.decision == decision), None)
        learned = same or Candidate(Suggestion(kind=_KINDS[str(play)], code=code or "", confidence=1.0,  # type: ignore[arg-type]
                                               explanation=f"it repaired this crash before (repair {entry.get('repair')})"),
                                    decision, crash=crash, shared=found[0].shared if found else {})
        break
    ordered = ([learned] if learned else []) + [c for c in found if c is not learned]
    skipped = sum(1 for r in RUN.history if (r.get("function"), r.get("file"), r.get("line")) == site[:3]
                  and r.get("decided_by") == "bot" and r.get("decision") in _SKIP_PLAYS)
    if skipped >= MAX_SKIPS and any(isinstance(c.decision, _SKIPPING) for c in ordered):
        say_once(f"{skipped} automatic repairs at {os.path.basename(crash.filename)}:{crash.lineno} skipped work; "
                 "no more are applied there without a person")
        ordered = [c for c in ordered if not isinstance(c.decision, _SKIPPING)]
    return ordered


def restored(decision: Decision, crash: Crash) -> Decision:
    """A surgery with the lines the report showed redacted (`daifu.report.redact`) put back as they are."""
    if isinstance(decision, Surgery) and has_placeholder(decision.source):
        return Surgery(restore_lines(decision.source, crash.source))
    return decision


def rank(found: list[Candidate]) -> list[Candidate]:
    """The bot's order, with the candidates that skip work moved last (their order kept)."""
    return sorted(found, key=lambda c: isinstance(c.decision, _SKIPPING))


class SuggestionLike(Protocol):
    """What `to_decision` reads of a suggestion (the protocol's, or one a person edited)."""

    @property
    def kind(self) -> str: ...
    @property
    def code(self) -> str: ...


def to_decision(suggestion: SuggestionLike) -> Decision:
    """The daifu decision carrying out `suggestion` (a patch's `target`, when it has one)."""
    if suggestion.kind == "surgery":
        return Surgery(suggestion.code)
    if suggestion.kind == "action":
        return Action(suggestion.code)
    if suggestion.kind == "patch_function":
        return Patch(getattr(suggestion, "target", None) or "", suggestion.code)
    if suggestion.kind == "skip_iteration":
        return SkipIteration()
    return Retry() if suggestion.kind == "retry" else Skip()


# -- approve="auto": verified by trial -----------------------------------------------------------


def _automatic(crash: Crash, found: list[Candidate], settings: Settings) -> Candidate | None:
    """The verified candidate applied without a person, and the watch of the iterations after it."""
    chosen = _verified(crash, found, settings)
    if chosen is not None:
        watch.start(crash, record.current_number(), chosen.decision)
    return chosen


def _verified(crash: Crash, found: list[Candidate], settings: Settings) -> Candidate | None:
    """The best candidate whose trial passed (or, with no trials here, that cannot discard state)."""
    started = time.monotonic()
    trials = 0
    for number, candidate in enumerate(found, 1):
        what = f"the bot's suggestion {number} ({candidate.kind})"
        with doing(f"checking {what} with the runtime's own validation"):
            usable = candidate.usable
        if not usable:
            continue
        with doing(f"checking {what} against the allowlist"):
            unsafe = candidate.unsafe
        if unsafe:
            say(f"not applying the bot's {candidate.kind} without a person (approve='ask' would offer it): "
                f"{'; '.join(unsafe)[:300]}")
            continue
        if trials >= settings.max_trials or time.monotonic() - started > settings.max_trials * settings.trial_seconds:
            say(f"stopped after {trials} trials; the other suggestions were not tried")
            break
        with doing(f"trying {what} on a copy of the run"):
            verdict = candidate.verdict or crash.trial(  # tried already when a person was asked first
                candidate.decision, settings.trial_seconds + waits(candidate.decision))
            candidate.tried(verdict)
        trials += 1
        if verdict.outcome is Outcome.UNAVAILABLE:
            say_once(f"no trial of a repair can run here: {verdict.detail}; only repairs that cannot discard "
                     "trained state are applied automatically")
            if cannot_discard(candidate.decision, crash):
                return candidate
            continue
        if verdict.passed and not candidate.trial_problems:
            return candidate
        if candidate.trial_problems:
            say(f"not applying the bot's {candidate.kind} without a person: {candidate.trial_problems[0][:300]}")
        why = candidate.trial_problems[0] if candidate.trial_problems else verdict.describe()
        crash.tried.append((repr(candidate.decision), f"refused by its trial: {why}"))
    return None


def unverifiable(decision: Decision, crash: Crash) -> tuple[str, ...]:
    """Why `decision` may not be applied without a person although its trial passes: a skipped statement that
    assigns leaves its targets holding what they held before (or unbound), and a skipped compound statement
    leaves its whole block unrun. The trial ends with the iteration and sees a healthy run; what the stale
    value does to the result (the previous step's action taken again, a metric never computed) shows only
    later, as a run that finishes with a different result. A skip of a statement that assigns nothing
    (a call for its effect) stays a candidate, ranked last."""
    if not isinstance(decision, Skip):
        return ()
    if crash.kind != "statement":
        return (f"skipping the `{crash.kind}` statement would leave its whole block unrun, silently",)
    assigned = _assigned(crash.statement)
    if assigned is None:
        return ("skipping the statement: what it assigns cannot be read, so stale values cannot be ruled out",)
    if assigned:
        return (f"skipping the statement would leave {', '.join(f'`{t}`' for t in assigned[:4])} holding its value "
                "from before the crash; no trial can tell what that does to the result",)
    return ()


def _assigned(statement: str) -> list[str] | None:
    """The targets `statement` assigns (names, attributes, items), in order; None when it does not parse."""
    try:
        tree = ast.parse(textwrap.dedent(statement))
    except SyntaxError:
        return None
    targets: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets += node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)):
            targets.append(node.target)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            targets += [ast.Name((a.asname or a.name).split(".")[0]) for a in node.names]
    return [ast.unparse(t) for t in targets]


def waits(decision: Decision) -> float:
    """The seconds an action deliberately waits (`time.sleep(<number>)`): its trial gets them on top."""
    code = code_of(decision) if isinstance(decision, Action) else None
    try:
        tree = ast.parse(textwrap.dedent(code or ""))
    except SyntaxError:
        return 0.0
    total = 0.0
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "sleep"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, (int, float))
        ):
            total += float(node.args[0].value)
    return min(total, 600.0)


def cannot_discard(decision: Decision, crash: Crash) -> bool:
    """Whether `decision`, applied without a trial, cannot throw away trained state or skip work
    silently: a retry, the skip of a whole iteration, or code that only adds statements and binds
    no name that holds a model or an optimizer."""
    if isinstance(decision, (Retry, SkipIteration)):
        return True
    if isinstance(decision, Action):
        return not (_bound_names(decision.code) & _stateful_names(crash))
    if isinstance(decision, Surgery):
        added = _added_statements(crash.source, decision.source)
        return added is not None and not (_bound_names(added) & _stateful_names(crash))
    return False


def _stateful_names(crash: Crash) -> set[str]:
    torch = sys.modules.get("torch")
    if torch is None:
        return set()
    values = {**dict(crash.globals), **dict(crash.locals)}
    kinds = (torch.nn.Module, torch.optim.Optimizer)
    return {name for name, value in values.items() if isinstance(value, kinds)}


def _bound_names(code: str) -> set[str]:
    try:
        tree = ast.parse(textwrap.dedent(code))
    except SyntaxError:
        return {"*"}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}


def _added_statements(old: str, new: str) -> str | None:
    """The statements `new` adds to `old`, when it only adds (every old statement kept, in order)."""
    try:
        old_tree, new_tree = ast.parse(textwrap.dedent(old)), ast.parse(textwrap.dedent(new))
    except SyntaxError:
        return None
    old_statements = [ast.dump(s) for s in ast.walk(old_tree) if isinstance(s, ast.stmt) and not _compound(s)]
    new_statements = [s for s in ast.walk(new_tree) if isinstance(s, ast.stmt) and not _compound(s)]
    remaining = list(old_statements)
    added = []
    for statement in new_statements:
        if remaining and ast.dump(statement) == remaining[0]:
            remaining.pop(0)
        else:
            added.append(statement)
    return None if remaining else "\n".join(ast.unparse(s) for s in added)


def _compound(node: ast.stmt) -> bool:
    return hasattr(node, "body")


# -- approve="ask": a person decides, with the verdicts in view ----------------------------------


def _ask_person(crash: Crash, diagnosis: Diagnosis, found: list[Candidate], settings: Settings) -> Candidate | None:
    """The candidate a person at the terminal applies (each shown with its trial verdict)."""
    if not _person_present():
        return None
    options = tried_for_a_person(crash, found, settings)
    from daifu.console.approval import approval_prompt  # the prompt loads only when a person is asked

    decision = approval_prompt(crash, diagnosis_text(diagnosis), options)
    if decision is None:
        return None
    return next((c for c in options if c.decision == decision), Candidate(Suggestion(
        kind="action", code="", explanation="chosen by a person", confidence=1.0), decision))


def tried_for_a_person(crash: Crash, found: list[Candidate], settings: Settings) -> list[Candidate]:
    """The usable candidates, those of `to_try` tried on a copy of the run, so that a person choosing
    among them sees each verdict (a candidate tried already keeps its verdict)."""
    for candidate in to_try(found, settings):
        if candidate.verdict is None:
            candidate.tried(crash.trial(candidate.decision, settings.trial_seconds + waits(candidate.decision)))
    return [c for c in found if c.usable]


def to_try(found: list[Candidate], settings: Settings) -> list[Candidate]:
    """The candidates tried before a person chooses: usable, inside the allowlist (the bot's other code
    does not run, even sandboxed, until a person applies it), the first `max_trials` of them."""
    return [c for c in found if c.usable and not c.outside_allowlist][: settings.max_trials]


def _person_present() -> bool:
    return bool(sys.stdin and sys.stdin.isatty())


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


def _remember(crash: Crash, decision: Decision) -> None:
    """Note the decision in `crash.tried`, so that if the crash comes back the next suggestion is taken."""
    text = repr(decision)
    if all(text != tried for tried, _ in crash.tried):
        crash.tried.append((text, "proposed by the repair bot"))


def record_answer(
    settings: Settings, report: CrashReport, answer: BotAnswer, found: list[Candidate], crash: Crash
) -> None:
    """Append the bot's answer, every trial, and the model call behind the answer (if any) to the
    workspace; a failure to write never costs the run."""
    trials = [  # what a trial printed is the program's output: redacted like everything else written here
        {"decision": play_name(c.decision), "code": code_of(c.decision), **c.verdict.to_data(),
         "output": redact(c.verdict.output)}
        for c in found
        if c.verdict is not None
    ]
    if crash.entry is not None and trials:
        crash.entry.extra["trials"] = [
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
        "suggestions": [
            dict(c.suggestion.model_dump(), valid=c.usable, reasons=list(c.problems), unattended=not c.unsafe,
                 needs_person=list(c.unsafe))
            if c.checked else dict(c.suggestion.model_dump(), checked=False)  # not reached: never checked
            for c in found
        ],
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

