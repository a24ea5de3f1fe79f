"""Approving a crashed batch job's repair from elsewhere: the pending-repairs API and the approval page.

Two kinds of caller, two kinds of credential:

- the *waiting process* posts its pending repair, long-polls for a decision and answers each
  proposal, under the service's usual `/v1` authorisation (its bearer token, when one is set) and,
  for everything after the post, the repair's own key (`X-DaiFu-Key`), which only it received;
- a *person* decides, on the page (`repairbot.ui`: log in with the service token, then a session
  cookie and a CSRF token in each form) or through the decision API (`Authorization: Bearer
  <token>`). The service token is `DAIFU_REPAIRBOT_TOKEN`; a service started without one has no
  way to let a person decide, and says so (`daifu serve` makes a random one for the run and prints
  it).

`router(...)` gives both the JSON endpoints (`/v1/pending...`) and the page (`/ui...`).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request

from repairbot import notify
from repairbot.pending import (
    Conflict,
    Full,
    InvalidChoice,
    PendingRepair,
    PendingStore,
    Status,
    UnknownRepair,
    WrongKey,
)
from repairbot.protocol import (
    ErrorResponse,
    PendingCreated,
    PendingPoll,
    PendingRepairRequest,
    PendingState,
    ProposalAnswer,
    RepairChoice,
    Withdrawal,
)
from repairbot.sessions import Sessions

POLL_MAX_S = 60.0
"""The longest a process's poll is held open."""
DECIDE_WAIT_S = 60.0
"""How long a decision's request waits, at most, for the process to accept or refuse it (an edit is tried first)."""

_KEY = Header(alias="X-DaiFu-Key", description="The key the process got when it posted the repair.")
_ERRORS: dict[int | str, dict[str, object]] = {
    401: {"model": ErrorResponse, "description": "The bearer token is missing or wrong."},
    403: {"model": ErrorResponse, "description": "The repair's key is wrong."},
    404: {"model": ErrorResponse, "description": "No pending repair has this id (or it left the history)."},
    409: {"model": ErrorResponse, "description": "The repair is not open to this any more (decided, or closed)."},
}


@dataclass
class Approvals:
    """What the API and the page share: the store, the sessions, the token and where links point.

    token: the service token a person proves they hold; `None`: nobody can decide here.
    public_url: the address people reach the service at (`DAIFU_PUBLIC_URL`, e.g. through an SSH
    tunnel), used in links; by default the address the process used. notify_url: the webhook.
    """

    token: str | None
    public_url: str | None = None
    notify_url: str | None = None
    store: PendingStore = field(default_factory=PendingStore)
    sessions: Sessions = field(default_factory=Sessions)

    def __post_init__(self) -> None:
        for name in ("notify_url", "public_url"):
            value = getattr(self, name)
            if value is not None and not value.startswith(("http://", "https://")):
                raise ValueError(f"{name} {value!r} is not an http(s) URL")

    def page_url(self, request: Request, repair_id: str) -> str:
        base = (self.public_url or str(request.base_url)).rstrip("/")
        return f"{base}/ui/repairs/{repair_id}"

    def bearer_ok(self, request: Request) -> bool:
        """Whether the request carries `Authorization: Bearer <the service token>`."""
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return (
            self.token is not None
            and scheme.lower() == "bearer"
            and secrets.compare_digest(given.encode(), self.token.encode())
        )

    def repair(self, repair_id: str) -> PendingRepair:
        try:
            return self.store.get(repair_id)
        except UnknownRepair:
            raise HTTPException(404, f"No pending repair {repair_id!r} here (unknown, or no longer kept).") from None

    def for_process(self, repair_id: str, key: str) -> PendingRepair:
        try:
            return self.store.for_process(repair_id, key)
        except UnknownRepair:
            raise HTTPException(404, f"No pending repair {repair_id!r} here (unknown, or no longer kept).") from None
        except WrongKey:
            raise HTTPException(403, "This is not the key of that repair.") from None

    async def decide(self, repair_id: str, choice: RepairChoice, wait: float) -> PendingRepair:
        """Propose `choice` to the repair's process; wait up to `wait` s for it to accept or refuse.

        Raises `Conflict` when the repair is not waiting (someone decided first), `InvalidChoice`
        for a choice it cannot take, `UnknownRepair`.
        """
        repair = self.store.propose(repair_id, choice)
        number, until = repair.proposal, time.monotonic() + wait
        while repair.status is Status.PROPOSED and repair.proposal == number and time.monotonic() < until:
            await self.store.changed(repair, until - time.monotonic())
        return repair


def state(approvals: Approvals, repair: PendingRepair, request: Request) -> PendingState:
    return PendingState(
        id=repair.id,
        status=repair.status.value,
        job=repair.request.job,
        outcome=repair.outcome,
        decided_by=repair.decided_by,
        refusal=repair.refusal,
        url=approvals.page_url(request, repair.id),
    )


def router(approvals: Approvals, process_auth: Callable[[Request], None]) -> APIRouter:
    """The `/v1/pending` endpoints (the page's are in `repairbot.ui`)."""
    api = APIRouter(prefix="/v1/pending", tags=["pending repairs"], responses=_ERRORS)

    def person(request: Request) -> None:
        if approvals.token is None:
            raise HTTPException(403, "This service was started without a token, so nobody can decide repairs here: "
                                     "set DAIFU_REPAIRBOT_TOKEN (or use `daifu serve`, which makes one).")
        if not approvals.bearer_ok(request):
            raise HTTPException(401, "A valid bearer token is required.", headers={"WWW-Authenticate": "Bearer"})

    @api.post("", response_model=PendingCreated, status_code=201, dependencies=[Depends(process_auth)])
    async def post_pending(body: PendingRepairRequest, request: Request) -> PendingCreated:
        """A crashed process waits for a person's decision: register its repair (and notify, if configured)."""
        try:
            repair = approvals.store.add(body)
        except Full as error:
            raise HTTPException(503, str(error), headers={"Retry-After": "60"}) from None
        url = approvals.page_url(request, repair.id)
        if approvals.notify_url:
            notify.post_in_background(approvals.notify_url, notify.message(body, url))
        return PendingCreated(id=repair.id, key=repair.key, url=url)

    @api.get("/{repair_id}/poll", response_model=PendingPoll, dependencies=[Depends(process_auth)])
    async def poll(
        repair_id: str, key: str = _KEY, wait: float = Query(25.0, ge=0.0, le=POLL_MAX_S)
    ) -> PendingPoll:
        """The process's long poll: returns at once with a proposal, else when one comes or `wait` s pass."""
        repair = approvals.for_process(repair_id, key)
        if repair.status is Status.WAITING:
            await approvals.store.changed(repair, wait)
        if repair.status is Status.PROPOSED:
            return PendingPoll(status="proposed", proposal=repair.proposal, choice=repair.choice)
        return PendingPoll(status="waiting" if repair.status is Status.WAITING else "closed")

    @api.post("/{repair_id}/proposals/{proposal}", response_model=PendingState, dependencies=[Depends(process_auth)])
    async def answer(
        repair_id: str, proposal: int, body: ProposalAnswer, request: Request, key: str = _KEY
    ) -> PendingState:
        """The process accepts a proposal (the repair is decided) or refuses it (it waits again, the reason kept)."""
        approvals.for_process(repair_id, key)
        try:
            repair = approvals.store.answer(repair_id, key, proposal, body)
        except Conflict as error:
            raise HTTPException(409, str(error)) from None
        return state(approvals, repair, request)

    @api.post("/{repair_id}/withdraw", response_model=PendingState, dependencies=[Depends(process_auth)])
    async def withdraw(repair_id: str, body: Withdrawal, request: Request, key: str = _KEY) -> PendingState:
        """The process stops waiting (its deadline passed, or Ctrl-C): the repair closes, undecided."""
        approvals.for_process(repair_id, key)
        try:
            repair = approvals.store.withdraw(repair_id, key, body.reason)
        except Conflict as error:
            raise HTTPException(409, str(error)) from None
        return state(approvals, repair, request)

    @api.get("", response_model=list[PendingState], dependencies=[Depends(person)])
    async def list_pending(request: Request) -> list[PendingState]:
        """The repairs waiting (oldest first), then those closed (newest first)."""
        store = approvals.store
        return [state(approvals, r, request) for r in [*store.waiting(), *store.history()]]

    @api.get("/{repair_id}", response_model=PendingState, dependencies=[Depends(person)])
    async def get_pending(repair_id: str, request: Request) -> PendingState:
        """One repair's state."""
        return state(approvals, approvals.repair(repair_id), request)

    @api.post("/{repair_id}/decide", response_model=PendingState, dependencies=[Depends(person)])
    async def decide(
        repair_id: str, body: RepairChoice, request: Request, wait: float = Query(30.0, ge=0.0, le=DECIDE_WAIT_S)
    ) -> PendingState:
        """Decide a waiting repair, once: the answer comes when its process has accepted or refused the
        decision (or after `wait` s, still `proposed`). 409 when someone decided first."""
        approvals.repair(repair_id)
        choice = body if body.by else body.model_copy(update={"by": "API client"})
        try:
            repair = await approvals.decide(repair_id, choice, wait)
        except Conflict as error:
            raise HTTPException(409, str(error)) from None
        except InvalidChoice as error:
            raise HTTPException(400, str(error)) from None
        return state(approvals, repair, request)

    return api
