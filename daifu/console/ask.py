"""The console's `ask [question]`: the crash, and the person's question, put to the repair bot.

The bot gets the report it always gets (`daifu.report.build`: bounded, redacted) and the question,
redacted the same way; a follow-up `ask` about the same crash also sends the conversation so far:
each earlier question, the answer, and what came of its suggestions (their trial verdicts, the one
chosen). What was applied and failed since is in the report's `tried`. Its suggestions take the
path they take in automatic mode — checked and ranked (`candidates`, `rank`), tried on a copy of
the run (the verification stage, `daifu.decide.verify`), recorded (`record_answer`, which
`daifu report N` reads) — and the approval prompt offers them with their verdicts. What the person
chooses there is returned, for the console to take as its pending decision.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from daifu.console.prompt import choose
from daifu.core.crash import Crash
from daifu.core.decisions import Decision
from daifu.core.handling import RepairContext
from daifu.decide.automatic import diagnosis_text, record_answer
from daifu.decide.botclient import BotAnswer, ask_bot
from daifu.decide.candidates import Candidate, candidates, rank
from daifu.decide.verify import Verification
from daifu.report.build import build_report
from daifu.report.redact import redact
from daifu.state import RUN
from repairbot.protocol import MAX_EXCHANGES, MAX_QUESTION, Attempt, Exchange

MAX_ANSWER_KEPT = 2000
"""Characters of each answer kept for the conversation (the prompt shows less of the older ones)."""
MAX_TRIED_TEXT = 300


def ask(crash: Crash, context: RepairContext, number: int, question: str,
        show: Callable[[str], None]) -> Decision | None:
    """Ask the repair bot about `crash` (repair `number`), show its answer, and let the person choose
    among its suggestions; the decision chosen, or `None` (none chosen, or none to choose)."""
    settings = context.settings
    asked = redact(question.strip())[:MAX_QUESTION] or None
    earlier = conversation(number, crash)
    where = settings.bot_url or "the embedded rules engine, in-process"
    rounds = f", with the {len(earlier)} earlier round{'s' if len(earlier) > 1 else ''} of this conversation"
    show(f"Asking the repair bot ({where}){rounds if earlier else ''}...")
    report = build_report(crash)
    answer = ask_bot(
        report, settings.bot_url, settings.bot_deadline, question=asked, conversation=earlier[-MAX_EXCHANGES:]
    )
    show(answered(answer, asked))
    stage = Verification(crash, settings)
    found = rank(candidates(stage, answer.suggestions))
    usable = sum(1 for c in found if c.usable)
    if usable:
        tried = len(stage.to_try(found))
        show(f"Trying {tried} of its {usable} usable suggestion{'s' if usable > 1 else ''} on a copy of the run...")
    options = stage.for_a_person(found)
    context.shown.extend(c.decision for c in options)  # the one applied is credited to the bot
    record_answer(context, report, answer, found)
    if options:
        decision = choose(stage, diagnosis_text(answer.diagnosis), options)
    else:
        show("Root cause:\n" + "\n".join(f"  {line}" for line in diagnosis_text(answer.diagnosis).splitlines()))
        show("The repair bot has no suggestion that can be applied here.")
        decision = None
    earlier.append(_exchange(asked, answer, options, decision))
    return decision


@dataclass
class Conversation:
    """The rounds of `ask` about one crash: at `site`, last asked about in repair `number`."""

    site: tuple[str, str, int]
    number: int
    rounds: list[Exchange] = field(default_factory=list)


def conversation(number: int, crash: Crash) -> list[Exchange]:
    """The rounds of `ask` about this crash so far (the list itself, to append to).

    The conversation goes on in the same console, and when the crash comes back after a repair
    that failed (a later repair number, `attempt` > 1); a new crash, even at the same line, starts
    a new one. Only the latest conversation is kept.
    """
    held = RUN.conversation
    goes_on = isinstance(held, Conversation) and held.site == crash.site and (
        held.number == number or crash.attempt > 1
    )
    if not isinstance(held, Conversation) or not goes_on:
        held = RUN.conversation = Conversation(crash.site, number)
    held.number = number
    return held.rounds


def answered(answer: BotAnswer, question: str | None) -> str:
    """Who answered, and the answer to the question in words (or why there is none)."""
    who = answer.backend_used + ("" if answer.source == "in-process" else f" at {answer.source}")
    lines = [f"The repair bot ({who}) answered."]
    if answer.fallback_reason:
        lines.append(f"  (it fell back: {answer.fallback_reason[:300]})")
    if question:
        words = answer.answer or "(no answer in words to the question: the root cause below is its answer)"
        lines.append(f"Your question: {question}")
        lines += ["Answer:", *(f"  {line}" for line in words.splitlines())]
    return "\n".join(lines)


def _exchange(question: str | None, answer: BotAnswer, options: list[Candidate], chosen: Decision | None) -> Exchange:
    """This round, as the next `ask` sends it: the question, the answer, what came of the suggestions."""
    d = answer.diagnosis
    said = f"{answer.answer} " if answer.answer else ""
    words = f"{said}(Diagnosis: [{d.category}] {d.explanation})"
    tried = [
        Attempt(decision=_described(c), outcome=c.verdict.describe())  # "trial: ..." on a copy of the run
        for c in options
        if c.verdict is not None
    ]
    picked = next((c for c in options if c.decision == chosen), None)
    if chosen is not None:
        what = _described(picked) if picked else redact(repr(chosen))[:MAX_TRIED_TEXT]
        tried.append(Attempt(decision=what, outcome="chosen by the person, to be applied when the console is left"))
    elif options:
        tried.append(Attempt(decision="(none of the suggestions)", outcome="the person chose none of them"))
    if len(tried) > MAX_EXCHANGES:  # many trials configured: the best ranked, and the choice
        tried = tried[: MAX_EXCHANGES - 1] + tried[-1:]
    return Exchange(question=question or "", answer=words[:MAX_ANSWER_KEPT], tried=tried)


def _described(candidate: Candidate) -> str:
    """A suggestion in a line, as the bot wrote it: its kind and its explanation (redacted, bounded)."""
    return redact(f"{candidate.kind}: {candidate.explanation}")[:MAX_TRIED_TEXT]
