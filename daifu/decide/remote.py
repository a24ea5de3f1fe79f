"""`approve="remote"`: a person decides a batch job's crash from a browser while the process waits.

Long runs rarely have a terminal (`nohup`, SLURM, Kubernetes, `torchrun`). With `approve="remote"`
the crashed process keeps every live value and hands the decision to a person through the repair
bot service (`repairbot.approvals`), on its approval page (`/ui`):

1. each usable suggestion of the bot inside the allowlist (at most `max_trials`) is tried on a
   sandboxed copy of the run (`crash.trial`), as `approve="auto"` would — and nothing is applied;
2. the crash report (redacted, as the bot saw it), the diagnosis and every candidate with its trial
   verdict are posted as a *pending repair*; the terminal says where its page is and how long the
   process waits (the service may also notify a chat webhook);
3. the process long-polls for a decision. A person's choice arrives as a *proposal*, which the
   process checks itself, because only it holds the live state: a suggestion must still be
   applicable, a skip or retry must pass the runtime's validator (`crash.check`), and an edit
   written on the page must pass the validator and then its trial (unless the person asked to apply
   it whatever the trial says). The process accepts — the decision is taken, once — or refuses with
   the reason, which the page shows; nothing is applied when it refuses, and it waits on;
4. past `remote_deadline` seconds it withdraws the repair and falls back (`remote_fallback`):
   `raise` (the exception goes on) or `auto` (the verified automatic repair of `approve="auto"`).
   Ctrl-C ends the wait at once and propagates (the repair is withdrawn on the way, if the service
   answers within a second).

A policy installed with `daifu.set_policy` is asked before any of this (`daifu.decide.chain`); in a
multi-rank job only the rank deciding the crash posts it, and the others wait for its decision
(`daifu.decide.distributed`).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable

import httpx
from pydantic import ValidationError

from daifu import ranks
from daifu.config import Settings
from daifu.core.crash import Crash
from daifu.core.decisions import Action, Decision, Raise, Retry, Skip, SkipIteration, Surgery
from daifu.core.trial import Outcome, Verdict
from daifu.decide.automatic import Candidate, restored, tried_for_a_person, waits
from daifu.decide.botclient import BotAnswer
from daifu.report.redact import has_placeholder, redact
from daifu.say import say
from repairbot.protocol import (
    CrashReport,
    JobInfo,
    PendingCandidate,
    PendingCreated,
    PendingPoll,
    PendingRepairRequest,
    ProposalAnswer,
    RepairChoice,
    Suggestion,
    Withdrawal,
)

POLL_S = 25.0
"""Seconds one long poll is held open by the service."""
REQUEST_S = 30.0
"""Seconds any other call to the service may take."""
WITHDRAW_S = 1.0
"""Seconds spent telling the service, on Ctrl-C, that the process stops waiting."""
MAX_POSTS = 5
"""Times the repair is posted again after the service forgot it (a restart), before falling back."""
_GENERIC: dict[str, Decision] = {"skip": Skip(), "skip_iteration": SkipIteration(), "retry": Retry()}


class RemoteFailed(Exception):
    """The service could not be used; the message says why in a few words."""


class Forgotten(RemoteFailed):
    """The service no longer holds this repair (it restarted, or took the process for gone)."""


def decide(crash: Crash, report: CrashReport, answer: BotAnswer, found: list[Candidate], settings: Settings,
           auto: Callable[[], Candidate | None]) -> Candidate | None:
    """The candidate a person chose for `crash` on the approval page (a `Raise` one when they
    rejected it), or, past the deadline or without a service, the fallback: `auto()` or a `Raise`."""
    if settings.bot_url is None:
        return _fall_back(settings, auto, "approve='remote' needs a repair bot service to wait on "
                                          "(DAIFU_REPAIRBOT_URL or configure(bot_url=...))")
    tried_for_a_person(crash, found, settings)
    try:
        body = pending_request(crash, report, answer, found, settings)
    except ValidationError as error:  # a bound of the protocol passed: say so, never lose the crash to it
        return _fall_back(settings, auto, f"the crash could not be described to the service ({error.error_count()} "
                                          "fields out of bounds)")
    with httpx.Client(base_url=settings.bot_url.rstrip("/"), headers=_headers(), timeout=REQUEST_S) as client:
        return _Wait(client, crash, found, settings, body).run(auto)


def pending_request(crash: Crash, report: CrashReport, answer: BotAnswer, found: list[Candidate],
                    settings: Settings) -> PendingRepairRequest:
    """What the service and the page get: the report, the diagnosis, each candidate with its verdict
    (redacted: a trial's exception message may quote a value), and the choices the runtime refuses here."""
    unavailable = {}
    for name, decision in _GENERIC.items():
        problem = crash.check(decision)
        if problem:
            unavailable[name] = redact(problem)[:500]
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
    return PendingCandidate(
        kind=candidate.suggestion.kind,
        code=candidate.suggestion.code,  # as the bot wrote it, against the redacted source the page shows
        explanation=candidate.explanation[:8000],
        confidence=candidate.confidence,
        target=candidate.suggestion.target,
        verdict=redact(verdict.describe())[:4000] if verdict is not None else None,
        passed=verdict.passed if tried and verdict is not None else None,
        problems=[redact(p)[:1000] for p in candidate.problems][:20],
        needs_person=[redact(u)[:500] for u in candidate.unsafe][:50],
    )


def _headers() -> dict[str, str]:
    token = os.environ.get("DAIFU_REPAIRBOT_TOKEN")
    return {"Authorization": f"Bearer {token}"} if token else {}


def _fall_back(settings: Settings, auto: Callable[[], Candidate | None], why: str) -> Candidate | None:
    say(f"{why}: {_fallback_text(settings)}")
    if settings.remote_fallback == "auto":
        return auto()
    return Candidate(Suggestion(kind="skip", explanation="no decision came", confidence=0.0), Raise())


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

    def __init__(self, client: httpx.Client, crash: Crash, found: list[Candidate], settings: Settings,
                 body: PendingRepairRequest) -> None:
        self.client, self.crash, self.found, self.settings, self.body = client, crash, found, settings, body
        self.started = time.monotonic()
        self.until = self.started + settings.remote_deadline
        self.created: PendingCreated | None = None
        self.posts = 0

    def run(self, auto: Callable[[], Candidate | None]) -> Candidate | None:
        try:
            try:
                self.post()
            except RemoteFailed as error:
                return _fall_back(self.settings, auto, f"could not hand the crash to {self.settings.bot_url} ({error})")
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
                except RemoteFailed:
                    pass
                continue
            except RemoteFailed as error:
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
        reply = self._call("POST", "/v1/pending", content=self.body.model_dump_json().encode(),
                           headers={"Content-Type": "application/json"})
        try:
            self.created = self._parse(PendingCreated, reply)
        except KeyboardInterrupt:  # the service holds the repair now: learn its id, so that it can be withdrawn
            self.created = self._parse(PendingCreated, reply)
            raise
        crash, left = self.crash, max(0.0, self.until - time.monotonic())
        ends = time.strftime("%H:%M:%S", time.localtime(time.time() + left))
        say(f"{crash.exception_type} at {os.path.basename(crash.filename)}:{crash.lineno} waits for a decision at "
            f"{self.created.url} — for up to {_duration(left)} (until {ends}); then {_fallback_text(self.settings)}")

    def poll(self, seconds: float) -> PendingPoll:
        assert self.created is not None
        reply = self._call("GET", f"/v1/pending/{self.created.id}/poll", params={"wait": f"{seconds:.1f}"},
                           timeout=seconds + REQUEST_S)
        poll: PendingPoll = self._parse(PendingPoll, reply)
        if poll.status == "closed":  # taken for gone (the process was stopped a while), never decided
            raise Forgotten("it closed the repair undecided")
        return poll

    def answer(self, proposal: int, answer: ProposalAnswer) -> None:
        assert self.created is not None
        self._call("POST", f"/v1/pending/{self.created.id}/proposals/{proposal}",
                   content=answer.model_dump_json().encode(), headers={"Content-Type": "application/json"})

    def withdraw(self, reason: str, seconds: float) -> None:
        """Tell the service the process stops waiting; a failure only costs the page's accuracy."""
        if self.created is None:
            return
        try:
            self._call("POST", f"/v1/pending/{self.created.id}/withdraw", content=Withdrawal(reason=reason[:500])
                       .model_dump_json().encode(), headers={"Content-Type": "application/json"}, timeout=seconds)
        except RemoteFailed:
            pass

    def _call(self, method: str, path: str, timeout: float = REQUEST_S, **options: object) -> httpx.Response:
        headers = dict(options.pop("headers", {}) or {})  # type: ignore[call-overload]
        if self.created is not None and path != "/v1/pending":
            headers["X-DaiFu-Key"] = self.created.key
        try:
            reply = self.client.request(method, path, headers=headers, timeout=timeout, **options)  # type: ignore[arg-type]
        except httpx.HTTPError as error:
            raise RemoteFailed(f"{type(error).__name__}: {error}" if str(error) else type(error).__name__) from None
        if reply.status_code == 404 and path != "/v1/pending":
            raise Forgotten("HTTP 404")
        if reply.status_code == 409:
            raise Forgotten(f"HTTP 409: {_detail(reply)}")
        if reply.status_code >= 400:
            raise RemoteFailed(f"HTTP {reply.status_code}: {_detail(reply)}")
        return reply

    @staticmethod
    def _parse(model: type[PendingCreated] | type[PendingPoll], reply: httpx.Response):  # type: ignore[no-untyped-def]
        try:
            return model.model_validate_json(reply.content)
        except ValidationError:
            raise RemoteFailed("the reply does not follow the protocol") from None

    # -- a person's choice ---------------------------------------------------------------------

    def consider(self, proposal: int, choice: RepairChoice) -> Candidate | None:
        """Judge a proposal; the candidate when accepted (and confirmed), else `None` (waiting on)."""
        who = choice.by or "someone"
        what = _what(choice, self.found)
        chosen, refusal = self.judge(choice)
        note = chosen.verdict.describe() if chosen is not None and chosen.verdict is not None else ""
        if chosen is None:
            say(f"{who} chose remotely to {what}: refused, nothing applied: {refusal}; still waiting")
            try:
                self.answer(proposal, ProposalAnswer(accepted=False, reason=redact(refusal)[:4000],
                                                     note=redact(note)[:4000]))
            except RemoteFailed:
                pass
            return None
        try:
            self.answer(proposal, ProposalAnswer(accepted=True, note=redact(note)[:4000]))
        except Forgotten as error:
            say(f"{who}'s decision ({what}) came after the service closed this repair ({error}); not applied")
            return None
        except RemoteFailed as error:
            say(f"could not confirm {who}'s decision to the service ({error}); carrying it out")
        waited = _duration(time.monotonic() - self.started)
        say(f"{who} decided remotely after {waited}: {what}" + (f" ({note})" if note else ""))
        if self.crash.entry is not None:
            self.crash.entry.extra["decided_by_person"] = who
        return chosen

    def judge(self, choice: RepairChoice) -> tuple[Candidate | None, str]:
        """The candidate carrying out `choice`, or `None` and why the runtime (or the trial) refuses it."""
        crash, who = self.crash, choice.by or "someone"
        if choice.choice == "reject":
            return Candidate(Suggestion(kind="skip", explanation=f"rejected by {who}", confidence=1.0), Raise()), ""
        if choice.choice == "apply":
            index = choice.candidate if choice.candidate is not None else -1
            if not 0 <= index < len(self.found):
                return None, f"there is no suggestion {index + 1}"
            candidate = self.found[index]
            if candidate.problems:
                return None, "; ".join(candidate.problems)
            return candidate, ""
        if choice.choice in _GENERIC:
            decision = _GENERIC[choice.choice]
            problem = crash.check(decision)
            kind = "skip" if choice.choice == "skip" else choice.choice
            suggestion = Suggestion(kind=kind, explanation=f"chosen by {who}", confidence=1.0)  # type: ignore[arg-type]
            return (None, problem) if problem else (Candidate(suggestion, decision), "")
        return self.edited(choice)

    def edited(self, choice: RepairChoice) -> tuple[Candidate | None, str]:
        """A person's own surgery or action: the runtime's validator, then a trial, decide whether it may run."""
        crash, kind = self.crash, choice.kind or "surgery"
        decision: Decision = restored(Surgery(choice.code), crash) if kind == "surgery" else Action(choice.code)
        code = decision.source if isinstance(decision, Surgery) else choice.code
        if has_placeholder(code):
            return None, "it holds a `<redacted:...>` placeholder where the original line could not be put back"
        problem = crash.check(decision)
        if problem:
            return None, f"the runtime refuses this {kind}: {problem}"
        verdict: Verdict = crash.trial(decision, self.settings.trial_seconds + waits(decision))
        if verdict.outcome is not Outcome.UNAVAILABLE and not verdict.passed and not choice.force:
            return None, (f"its trial did not pass ({verdict.describe()}); tick 'apply even if its trial fails' "
                          "to apply it anyway")
        suggestion = Suggestion(kind=kind, code=choice.code, explanation=f"written by {choice.by or 'a person'}",
                                confidence=1.0)
        return Candidate(suggestion, decision, verdict=verdict), ""


def _what(choice: RepairChoice, found: list[Candidate]) -> str:
    if choice.choice == "apply" and choice.candidate is not None and choice.candidate < len(found):
        return f"apply suggestion {choice.candidate + 1} ({found[choice.candidate].kind})"
    return {
        "reject": "reject the repair (the exception goes on)",
        "edit": f"apply an edited {choice.kind or 'repair'}",
        "skip": "skip the statement",
        "skip_iteration": "skip the rest of the iteration",
        "retry": "retry the statement",
    }.get(choice.choice, choice.choice)


def _detail(reply: httpx.Response) -> str:
    try:
        said = reply.json()
    except ValueError:
        return reply.text[:200]
    detail = said.get("detail") if isinstance(said, dict) else None
    return detail[:300] if isinstance(detail, str) else str(said)[:200]
