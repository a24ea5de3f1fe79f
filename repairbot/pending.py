"""Pending repairs: crashed processes waiting for a person's decision (`approve="remote"`).

A process whose crash waits for a person posts a *pending repair* (its redacted crash report, the
bot's diagnosis, each candidate with its trial verdict) and long-polls for a decision. A person
decides on the approval page or through the decision API. The life of one repair:

    waiting --a person decides--> proposed --the process accepts--> decided
                                           --the process refuses--> waiting (the reason is kept)
    waiting or proposed --the process withdraws (deadline, Ctrl-C)--> withdrawn
    waiting or proposed --no poll for `gone_after` seconds--> gone

The process, not the service, checks a decision: only it holds the live state the runtime's
validator and a trial need. So a person's choice is first a *proposal*: while one is out, every
other decision is refused (409), and once the process accepts it the repair is decided for good.
A decision is bound to the repair's id; ids (and the key the process polls with) are random, 128
bits and more, so neither can be guessed from another.

Everything is in memory and bounded: `open_max` repairs waiting at once (more are refused), the
latest `closed_max` closed ones kept for the history. All calls are made from the server's event
loop (the endpoints are `async`), so no two of them interleave.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from repairbot.protocol import PendingRepairRequest, ProposalAnswer, RepairChoice, describe_choice

OPEN_MAX = 32
CLOSED_MAX = 64
GONE_AFTER = 120.0
"""Seconds without a poll after which a waiting process is taken for gone (it polls every 25 s)."""


class Status(str, Enum):
    WAITING = "waiting"
    PROPOSED = "proposed"
    DECIDED = "decided"
    WITHDRAWN = "withdrawn"
    GONE = "gone"

    def __str__(self) -> str:
        return self.value


class UnknownRepair(LookupError):
    """No pending repair has this id (never had, or it left the bounded history)."""


class WrongKey(PermissionError):
    """The key given is not the one the repair's process got."""


class Conflict(Exception):
    """The repair is no longer open to this decision; the message says what happened to it."""


class InvalidChoice(ValueError):
    """A decision that cannot be made on this repair (no such suggestion, an edit without code...)."""


class Full(Exception):
    """Too many repairs are waiting already."""


@dataclass
class Event:
    """One line of a repair's log: when, who, what."""

    at: float
    who: str
    text: str


@dataclass
class PendingRepair:
    """One crash waiting for (or given) a decision.

    created: wall-clock time it was posted. last_seen: monotonic time of the process's last poll.
    choice: the proposal out or the decision taken. refusal, refused: the last refused proposal,
    why and what it was (the page shows the reason and keeps the edit). events: the repair's log.
    """

    id: str
    key: str
    request: PendingRepairRequest
    created: float
    last_seen: float
    status: Status = Status.WAITING
    proposal: int = 0
    choice: RepairChoice | None = None
    outcome: str = ""
    decided_by: str = ""
    closed_at: float | None = None
    refusal: str = ""
    refused: RepairChoice | None = None
    note: str = ""
    events: list[Event] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @property
    def open(self) -> bool:
        return self.status in (Status.WAITING, Status.PROPOSED)


def describe(choice: RepairChoice, request: PendingRepairRequest) -> str:
    """A decision in a few words, as the page, the history and the process's terminal say it
    (`repairbot.protocol.describe_choice`)."""
    return describe_choice(choice, [candidate.kind for candidate in request.candidates])


class PendingStore:
    """The pending repairs of this service, open and recently closed."""

    def __init__(
        self,
        open_max: int = OPEN_MAX,
        closed_max: int = CLOSED_MAX,
        gone_after: float = GONE_AFTER,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.open_max = open_max
        self.gone_after = gone_after
        self.clock = clock
        self._open: dict[str, PendingRepair] = {}
        self._closed: deque[PendingRepair] = deque(maxlen=closed_max)

    def add(self, request: PendingRepairRequest) -> PendingRepair:
        """Register a new waiting repair; `Full` when `open_max` are waiting already."""
        self._sweep()
        if len(self._open) >= self.open_max:
            raise Full(f"{len(self._open)} repairs are waiting for a decision already; this service holds at most "
                       f"{self.open_max}")
        repair = PendingRepair(secrets.token_urlsafe(16), secrets.token_urlsafe(24), request, time.time(), self.clock())
        job = request.job
        repair.events.append(Event(repair.created, f"{job.name} (pid {job.pid})", "waits for a decision"))
        self._open[repair.id] = repair
        return repair

    def get(self, repair_id: str) -> PendingRepair:
        """The repair with this id, open or in the history; `UnknownRepair` if none."""
        self._sweep()
        found = self._open.get(repair_id) or next((r for r in self._closed if r.id == repair_id), None)
        if found is None:
            raise UnknownRepair(repair_id)
        return found

    def for_process(self, repair_id: str, key: str) -> PendingRepair:
        """The repair, for its own process (`WrongKey` for any other caller); counts as a sign of life."""
        repair = self.get(repair_id)
        if not secrets.compare_digest(key.encode(), repair.key.encode()):
            raise WrongKey(repair_id)
        if repair.open:
            repair.last_seen = self.clock()
        return repair

    def waiting(self) -> list[PendingRepair]:
        """The open repairs, oldest first."""
        self._sweep()
        return sorted(self._open.values(), key=lambda r: r.created)

    def history(self) -> list[PendingRepair]:
        """The closed repairs kept, newest first."""
        self._sweep()
        return sorted(self._closed, key=lambda r: r.closed_at or 0.0, reverse=True)

    def propose(self, repair_id: str, choice: RepairChoice) -> PendingRepair:
        """A person's decision, sent to the process to check. `Conflict` unless the repair is waiting."""
        repair = self.get(repair_id)
        if repair.status is not Status.WAITING:
            raise Conflict(self._why_not_open(repair))
        self._check(choice, repair.request)
        repair.status, repair.choice = Status.PROPOSED, choice
        repair.proposal += 1
        repair.events.append(Event(time.time(), choice.by, f"decides: {describe(choice, repair.request)}"))
        self._changed(repair)
        return repair

    def answer(self, repair_id: str, key: str, proposal: int, answer: ProposalAnswer) -> PendingRepair:
        """The process's answer to proposal number `proposal`; `Conflict` if that is not the one out."""
        repair = self.for_process(repair_id, key)
        if repair.status is not Status.PROPOSED or proposal != repair.proposal or repair.choice is None:
            raise Conflict(f"proposal {proposal} is not the one awaiting an answer ({self._why_not_open(repair)})")
        choice, who = repair.choice, f"{repair.request.job.name} (pid {repair.request.job.pid})"
        repair.note = answer.note
        if answer.accepted:
            repair.outcome = describe(choice, repair.request)
            repair.decided_by, repair.refusal, repair.refused = choice.by, "", None
            repair.events.append(Event(time.time(), who, "accepted" + (f": {answer.note}" if answer.note else "")))
            self._close(repair, Status.DECIDED)
        else:
            repair.status, repair.refusal, repair.refused, repair.choice = Status.WAITING, answer.reason, choice, None
            repair.events.append(Event(time.time(), who, f"refused: {answer.reason}"))
            self._changed(repair)
        return repair

    def withdraw(self, repair_id: str, key: str, reason: str) -> PendingRepair:
        """The process stops waiting; a proposal still out is void (it was never carried out)."""
        repair = self.for_process(repair_id, key)
        if not repair.open:
            raise Conflict(self._why_not_open(repair))
        who = f"{repair.request.job.name} (pid {repair.request.job.pid})"
        late = repair.status is Status.PROPOSED and repair.choice is not None
        void = f"; {repair.choice.by}'s decision came too late" if late and repair.choice else ""
        repair.outcome = f"{reason}{void}"
        repair.events.append(Event(time.time(), who, f"withdraws: {repair.outcome}"))
        self._close(repair, Status.WITHDRAWN)
        return repair

    async def changed(self, repair: PendingRepair, seconds: float) -> None:
        """Wait until `repair` changes, or `seconds` pass."""
        event = repair.changed
        try:
            await asyncio.wait_for(event.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    def _check(self, choice: RepairChoice, request: PendingRepairRequest) -> None:
        if choice.choice == "apply":
            if choice.candidate is None or choice.candidate >= len(request.candidates):
                raise InvalidChoice(f"there is no suggestion {0 if choice.candidate is None else choice.candidate + 1} "
                                    f"(this repair has {len(request.candidates)})")
            problems = request.candidates[choice.candidate].problems
            if problems:
                raise InvalidChoice(f"suggestion {choice.candidate + 1} cannot be applied: {'; '.join(problems)}")
        elif choice.choice == "edit":
            if choice.kind is None or not choice.code.strip():
                raise InvalidChoice("an edit needs its kind (surgery or action) and its code")
        elif choice.choice in request.unavailable:
            what = choice.choice.replace("_", " ")
            raise InvalidChoice(f"{what} is not possible here: {request.unavailable[choice.choice]}")

    def _why_not_open(self, repair: PendingRepair) -> str:
        if repair.status is Status.PROPOSED and repair.choice is not None:
            return (f"{repair.choice.by or 'someone'} decided already ({describe(repair.choice, repair.request)}); "
                    "the process is checking it")
        if repair.status is Status.DECIDED:
            return f"{repair.decided_by or 'someone'} decided already: {repair.outcome}"
        if repair.status is Status.WAITING:
            return "it is waiting for a decision"
        return f"it is closed: {repair.outcome}"

    def _close(self, repair: PendingRepair, status: Status) -> None:
        repair.status, repair.closed_at = status, time.time()
        self._open.pop(repair.id, None)
        self._closed.append(repair)
        self._changed(repair)

    def _changed(self, repair: PendingRepair) -> None:
        """Wake everyone waiting on `repair` (its process's poll, a person's page)."""
        event, repair.changed = repair.changed, asyncio.Event()
        event.set()

    def _sweep(self) -> None:
        now = self.clock()
        for repair in [r for r in self._open.values() if now - r.last_seen > self.gone_after]:
            repair.outcome = (f"its process stopped asking after {now - repair.last_seen:.0f} s without a poll "
                              "(it ended, or lost the connection)")
            repair.events.append(Event(time.time(), "service", repair.outcome))
            self._close(repair, Status.GONE)
