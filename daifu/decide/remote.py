"""`approve="remote"`: a person decides a batch job's crash from a browser while the process waits.

Long runs rarely have a terminal (`nohup`, SLURM, Kubernetes, `torchrun`). With `approve="remote"`
the crashed process keeps every live value and hands the decision to a person through the repair
bot service (`repairbot.approvals`), on its approval page (`/ui`):

1. each usable suggestion of the bot inside the allowlist (at most `max_trials`) is tried on a
   sandboxed copy of the run (the verification stage, `daifu.decide.verify`), as `approve="auto"`
   would — and nothing is applied;
2. the crash report (redacted, as the bot saw it), the diagnosis and every candidate with its trial
   verdict are posted as a *pending repair*; the terminal says where its page is and how long the
   process waits (the service may also notify a chat webhook);
3. the process long-polls for a decision. A person's choice arrives as a *proposal*, which the
   process checks itself, because only it holds the live state: a suggestion must still be
   applicable, a skip or retry must pass the runtime's validator, and an edit written on the page
   must pass the validator and then its trial (unless the person asked to apply it whatever the
   trial says): the same verification stage. The process accepts — the decision is taken, once — or refuses with
   the reason, which the page shows; nothing is applied when it refuses, and it waits on;
4. past `remote_deadline` seconds it withdraws the repair and falls back (`remote_fallback`):
   `raise` (the exception goes on) or `auto` (the verified automatic repair of `approve="auto"`).
   Ctrl-C ends the wait at once and propagates (the repair is withdrawn on the way, if the service
   answers within a second).

A policy installed with `daifu.set_policy` is asked before any of this (`daifu.decide.chain`); in a
multi-rank job only the rank deciding the crash posts it, and the others wait for its decision
(`daifu.decide.distributed`). The calls go through the service client (`daifu.decide.transport`);
the choices and their words are the protocol's, each taken as its decision by `daifu.core.kinds`.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable

from pydantic import ValidationError

from daifu import ranks
from daifu.config import Settings
from daifu.core.decisions import BadDecision, Raise
from daifu.core.handling import RepairContext
from daifu.core.kinds import code_of, from_choice, from_wire
from daifu.core.trial import Outcome, Verdict
from daifu.decide import transport
from daifu.decide.botclient import BotAnswer
from daifu.decide.by_person import person_decided, waiting
from daifu.decide.candidates import Candidate, restored
from daifu.decide.transport import ErrorStatus, ServiceFailed
from daifu.decide.verify import Verification
from daifu.report.redact import has_placeholder, redact
from daifu.say import say
from repairbot.protocol import (
    PENDING_ROUTE,
    PLAIN_CHOICES,
    POLL_ROUTE,
    PROPOSAL_ROUTE,
    WITHDRAW_ROUTE,
    CrashReport,
    JobInfo,
    PendingCandidate,
    PendingCreated,
    PendingPoll,
    PendingRepairRequest,
    ProposalAnswer,
    RepairChoice,
    Withdrawal,
    describe_choice,
)

POLL_S = 25.0
"""Seconds one long poll is held open by the service."""
REQUEST_S = 30.0
"""Seconds any other call to the service may take."""
WITHDRAW_S = 1.0
"""Seconds spent telling the service, on Ctrl-C, that the process stops waiting."""
MAX_POSTS = 5
"""Times the repair is posted again after the service forgot it (a restart), before falling back."""


class Forgotten(ServiceFailed):
    """The service no longer holds this repair (it restarted, or took the process for gone)."""


def decide(stage: Verification, context: RepairContext, report: CrashReport, answer: BotAnswer,
           found: list[Candidate], auto: Callable[[], Candidate | None]) -> Candidate | None:
    """The candidate a person chose for the crash on the approval page (a `Raise` one when they
    rejected it), or, past the deadline or without a service, the fallback: `auto()` or a `Raise`."""
    settings = context.settings
    if settings.bot_url is None:
        return _fall_back(settings, auto, "approve='remote' needs a repair bot service to wait on "
                                          "(DAIFU_REPAIRBOT_URL or configure(bot_url=...))")
    stage.for_a_person(found)
    context.shown.extend(c.decision for c in found if c.suggestion is not None)
    try:
        body = pending_request(stage, report, answer, found)
    except ValidationError as error:  # a bound of the protocol passed: say so, never lose the crash to it
        return _fall_back(settings, auto, f"the crash could not be described to the service ({error.error_count()} "
                                          "fields out of bounds)")
    with transport.Client(settings.bot_url, REQUEST_S) as client:
        return _Wait(client, stage, context, found, body).run(auto)


def pending_request(stage: Verification, report: CrashReport, answer: BotAnswer,
                    found: list[Candidate]) -> PendingRepairRequest:
    """What the service and the page get: the report, the diagnosis, each candidate with its verdict
    (redacted: a trial's exception message may quote a value), and the choices the runtime refuses here."""
    settings = stage.settings
    unavailable = {}
    for choice in PLAIN_CHOICES:
        problems = stage.problems(from_choice(choice))
        if problems:
            unavailable[choice] = redact("; ".join(problems))[:500]
    return PendingRepairRequest(
        job=job(),
        report=report,
        diagnosis=answer.diagnosis,
        backend_used=answer.backend_used[:100],
        candidates=[_candidate(c) for c in found[:16]],
        unavailable=unavailable,
        deadline_s=settings.remote_deadline,
        fallback="auto" if settings.remote_fallback == "auto" else "raise",
    )


def job() -> JobInfo:
    """This process as the page lists it: `DAIFU_JOB_NAME` (else the script's name), host, pid, rank."""
    script = sys.argv[0] if sys.argv and sys.argv[0] else ""
    name = os.environ.get("DAIFU_JOB_NAME") or os.path.basename(script) or "python"
    return JobInfo(name=name[:200], host=socket.gethostname()[:200], pid=os.getpid(), rank=ranks.rank())


def _candidate(candidate: Candidate) -> PendingCandidate:
    verdict = candidate.verdict
    tried = verdict is not None and verdict.outcome is not Outcome.UNAVAILABLE
    sent = candidate.suggestion  # as the bot wrote it, against the redacted source the page shows
    return PendingCandidate(
        kind=candidate.kind,  # type: ignore[arg-type]  # the bot's own kind: a protocol `SuggestionKind`
        code=sent.code if sent is not None else candidate.code,
        explanation=candidate.explanation[:8000],
        confidence=candidate.confidence,
        target=candidate.target,
        verdict=redact(verdict.describe())[:4000] if verdict is not None else None,
        passed=verdict.passed if tried and verdict is not None else None,
        problems=[redact(p)[:1000] for p in candidate.problems][:20],
        needs_person=[redact(u)[:500] for u in candidate.unsafe][:50],
    )


def _fall_back(settings: Settings, auto: Callable[[], Candidate | None], why: str) -> Candidate | None:
    say(f"{why}: {_fallback_text(settings)}")
    if settings.remote_fallback == "auto":
        return auto()
    return Candidate(Raise())


def _fallback_text(settings: Settings) -> str:
    if settings.remote_fallback == "auto":
        return "falling back to a verified automatic repair (remote_fallback='auto')"
    return "the exception goes on (remote_fallback='raise')"


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds / 3600:.1f} h"


class _Wait:
    """One crash waiting on the service: post, poll, judge proposals, until decided or past the deadline."""

    def __init__(self, client: transport.Client, stage: Verification, context: RepairContext,
                 found: list[Candidate], body: PendingRepairRequest) -> None:
        self.client, self.stage, self.context, self.found, self.body = client, stage, context, found, body
        self.crash, self.settings = stage.crash, context.settings
        self.started = time.monotonic()
        self.until = self.started + self.settings.remote_deadline
        self.created: PendingCreated | None = None
        self.posts = 0

    def run(self, auto: Callable[[], Candidate | None]) -> Candidate | None:
        try:
            try:
                self.post()
            except ServiceFailed as error:
                return _fall_back(self.settings, auto, f"could not hand the crash to {self.settings.bot_url} ({error})")
            with waiting(self.context):
                return self.wait(auto)
        except KeyboardInterrupt:
            say("Ctrl-C: stopped waiting for a decision")
            self.withdraw("the process was interrupted (Ctrl-C)", WITHDRAW_S)
            raise

    def wait(self, auto: Callable[[], Candidate | None]) -> Candidate | None:
        outage = 0
        while True:
            left = self.until - time.monotonic()
            if left <= 0:
                self.withdraw(f"no decision within {_duration(self.settings.remote_deadline)}; "
                              f"it falls back to {self.body.fallback}", REQUEST_S)
                waited = _duration(self.settings.remote_deadline)
                return _fall_back(self.settings, auto, f"no decision came within {waited}")
            try:
                poll = self.poll(min(POLL_S, left))
            except Forgotten as error:
                if self.posts >= MAX_POSTS:
                    return _fall_back(self.settings, auto, f"the service keeps forgetting this repair ({error})")
                say(f"the service no longer holds this repair ({error}); posting it again")
                try:
                    self.post()
                except ServiceFailed:
                    pass
                continue
            except ServiceFailed as error:
                outage += 1
                if outage == 1:
                    say(f"lost contact with the repair bot service ({error}); still waiting, trying again")
                time.sleep(min(2.0 ** min(outage, 5), max(0.0, self.until - time.monotonic())))
                continue
            outage = 0
            if poll.status == "proposed" and poll.choice is not None:
                chosen = self.consider(poll.proposal, poll.choice)
                if chosen is not None:
                    return chosen

    # -- talking to the service ----------------------------------------------------------------

    def post(self) -> None:
        self.posts += 1
        reply = self._call("POST", PENDING_ROUTE, body=self.body)
        try:
            self.created = transport.parsed(PendingCreated, reply)
        except KeyboardInterrupt:  # the service holds the repair now: learn its id, so that it can be withdrawn
            self.created = transport.parsed(PendingCreated, reply)
            raise
        crash, left = self.crash, max(0.0, self.until - time.monotonic())
        ends = time.strftime("%H:%M:%S", time.localtime(time.time() + left))
        say(f"{crash.exception_type} at {os.path.basename(crash.filename)}:{crash.lineno} waits for a decision at "
            f"{self.created.url} — for up to {_duration(left)} (until {ends}); then {_fallback_text(self.settings)}")

    def poll(self, seconds: float) -> PendingPoll:
        assert self.created is not None
        reply = self._call("GET", PENDING_ROUTE + POLL_ROUTE.format(repair_id=self.created.id),
                           params={"wait": f"{seconds:.1f}"}, timeout=seconds + REQUEST_S)
        poll = transport.parsed(PendingPoll, reply)
        if poll.status == "closed":  # taken for gone (the process was stopped a while), never decided
            raise Forgotten("it closed the repair undecided")
        return poll

    def answer(self, proposal: int, answer: ProposalAnswer) -> None:
        assert self.created is not None
        self._call("POST", PENDING_ROUTE + PROPOSAL_ROUTE.format(repair_id=self.created.id, proposal=proposal),
                   body=answer)

    def withdraw(self, reason: str, seconds: float) -> None:
        """Tell the service the process stops waiting; a failure only costs the page's accuracy."""
        if self.created is None:
            return
        try:
            self._call("POST", PENDING_ROUTE + WITHDRAW_ROUTE.format(repair_id=self.created.id),
                       body=Withdrawal(reason=reason[:500]), timeout=seconds)
        except ServiceFailed:
            pass

    def _call(self, method: str, path: str, body: Withdrawal | ProposalAnswer | PendingRepairRequest | None = None,
              params: dict[str, str] | None = None, timeout: float | None = None) -> bytes:
        """One call about this repair (its key sent once it has one); `Forgotten` when the service no
        longer holds it (404 for it, or 409)."""
        about = path != PENDING_ROUTE
        key = self.created.key if self.created is not None and about else None
        try:
            return self.client.call(method, path, body, key, params, timeout)
        except ErrorStatus as error:
            if (error.status == 404 and about) or error.status == 409:
                raise Forgotten(str(error)) from None
            raise

    # -- a person's choice ---------------------------------------------------------------------

    def consider(self, proposal: int, choice: RepairChoice) -> Candidate | None:
        """Judge a proposal; the candidate when accepted (and confirmed), else `None` (waiting on)."""
        who = choice.by or "someone"
        what = describe_choice(choice, [c.kind for c in self.found])
        chosen, refusal = self.judge(choice)
        note = chosen.verdict.describe() if chosen is not None and chosen.verdict is not None else ""
        if chosen is None:
            say(f"{who} chose remotely to {what}: refused, nothing applied: {refusal}; still waiting")
            try:
                self.answer(proposal, ProposalAnswer(accepted=False, reason=redact(refusal)[:4000],
                                                     note=redact(note)[:4000]))
            except ServiceFailed:
                pass
            return None
        try:
            self.answer(proposal, ProposalAnswer(accepted=True, note=redact(note)[:4000]))
        except Forgotten as error:
            say(f"{who}'s decision ({what}) came after the service closed this repair ({error}); not applied")
            return None
        except ServiceFailed as error:
            say(f"could not confirm {who}'s decision to the service ({error}); carrying it out")
        waited = _duration(time.monotonic() - self.started)
        say(f"{who} decided remotely after {waited}: {what}" + (f" ({note})" if note else ""))
        person_decided(self.context, chosen.decision, "approval page", who)
        return chosen

    def judge(self, choice: RepairChoice) -> tuple[Candidate | None, str]:
        """The candidate carrying out `choice`, or `None` and why the runtime (or the trial) refuses it."""
        if choice.choice == "apply":
            index = choice.candidate if choice.candidate is not None else -1
            if not 0 <= index < len(self.found):
                return None, f"there is no suggestion {index + 1}"
            candidate = self.found[index]
            if candidate.problems:
                return None, "; ".join(candidate.problems)
            return candidate, ""
        if choice.choice in PLAIN_CHOICES:
            decision = from_choice(choice.choice)
            problems = self.stage.problems(decision)
            return (None, "; ".join(problems)) if problems else (Candidate(decision), "")
        return self.edited(choice)

    def edited(self, choice: RepairChoice) -> tuple[Candidate | None, str]:
        """A person's own surgery or action: the runtime's validator, then a trial, decide whether it may run."""
        kind = choice.kind or "surgery"
        try:
            decision = restored(from_wire(kind, choice.code), self.crash)
        except BadDecision as bad:
            return None, str(bad)
        if has_placeholder(code_of(decision) or ""):
            return None, "it holds a `<redacted:...>` placeholder where the original line could not be put back"
        problems = self.stage.problems(decision)
        if problems:
            return None, f"the runtime refuses this {kind}: {'; '.join(problems)}"
        verdict: Verdict = self.stage.trial(decision)
        if verdict.outcome is not Outcome.UNAVAILABLE and not verdict.passed and not choice.force:
            return None, (f"its trial did not pass ({verdict.describe()}); tick 'apply even if its trial fails' "
                          "to apply it anyway")
        return Candidate(decision, verdict=verdict), ""
