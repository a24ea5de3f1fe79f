"""The approval page (`/ui`): pending repairs across jobs, each with its crash, diagnosis and
suggestions, and the forms that decide them.

Server-rendered HTML (Jinja2, every value escaped: crash reports carry text from user code), plain
forms that POST (the page works without JavaScript; `ui.js` only keeps the waiting times ticking
and says when a repair changed meanwhile), one stylesheet, no build step, nothing fetched from
elsewhere. Every response forbids framing, caching and referrers, and allows only this site's
scripts and styles (CSP). Login takes the service token and a name to decide under, and only a few
wrong tokens a minute (`repairbot.throttle`); see `repairbot.sessions` for the cookie and the CSRF
token every form carries. A repair's page, whose diffs of large sources take long to compute, is
built off the event loop.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from math import ceil
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

import jinja2
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from repairbot.approvals import DECIDE_WAIT_S, Approvals, state
from repairbot.diffs import added, in_context, source_diff
from repairbot.pending import Conflict, InvalidChoice, PendingRepair, Status, UnknownRepair, describe
from repairbot.protocol import CHOICES, EDIT_KINDS, PLAIN_CHOICES, PendingCandidate, RepairChoice
from repairbot.sessions import COOKIE, Session
from repairbot.throttle import LoginThrottle

_HERE = Path(__file__).parent
_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(_HERE / "pages"), autoescape=True, undefined=jinja2.StrictUndefined
)
TEMPLATES = Jinja2Templates(env=_ENV)
_STATIC = {"ui.css": "text/css", "ui.js": "text/javascript"}
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
}
FALLBACKS = {"raise": "let the exception go on", "auto": "apply a verified automatic repair, if one passes its trial"}
MAX_NAME = 60


def router(approvals: Approvals, throttle: LoginThrottle | None = None) -> APIRouter:
    """The page's routes, under `/ui`; `throttle` limits wrong logins (`repairbot.throttle`'s defaults)."""
    ui = APIRouter(prefix="/ui", include_in_schema=False)
    throttle = throttle or LoginThrottle()

    def page(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
        return TEMPLATES.TemplateResponse(request, name, context, status_code=status, headers=HEADERS)

    def message(request: Request, session: Session | None, title: str, text: str, status: int,
                back: str | None = None) -> Response:
        return page(request, "message.html", {"session": session, "title": title, "text": text, "back": back}, status)

    def session_of(request: Request) -> Session | None:
        """The logged-in session, or a session-less caller holding the token as a bearer header."""
        session = approvals.sessions.get(request.cookies.get(COOKIE))
        if session is None and approvals.bearer_ok(request):
            return Session("", "API client", "", 0.0)
        return session

    def to_login(request: Request) -> Response:
        return RedirectResponse(f"/ui/login?next={quote(request.url.path)}", 303, headers=HEADERS)

    @ui.get("/static/{name}")
    async def static(name: str) -> Response:
        if name not in _STATIC:
            return Response("not found", 404)
        return Response((_HERE / "static" / name).read_bytes(), media_type=_STATIC[name],
                        headers={"Cache-Control": "max-age=300", "X-Content-Type-Options": "nosniff"})

    @ui.get("/login")
    async def login_form(request: Request, next: str = "/ui") -> Response:
        return page(request, "login.html", {"session": None, "next": _local(next), "error": "",
                                             "disabled": approvals.token is None})

    @ui.post("/login")
    async def login(request: Request) -> Response:
        form = await _form(request)
        target = _local(form.get("next", "/ui"))
        if approvals.token is None:
            return page(request, "login.html", {"session": None, "next": target, "error": "", "disabled": True}, 403)
        address = request.client.host if request.client else ""
        wait = throttle.wait(address)
        if wait > 0:  # the guess is not even compared
            response = page(request, "login.html", {"session": None, "next": target, "disabled": False,
                                                    "error": f"Too many wrong tokens: try again in {ceil(wait)} s."}, 429)
            response.headers["Retry-After"] = str(ceil(wait))
            return response
        if not _same(form.get("token", ""), approvals.token):
            throttle.failed(address)
            return page(request, "login.html", {"session": None, "next": target, "disabled": False,
                                                 "error": "That is not this service's token."}, 401)
        name = " ".join(form.get("name", "").split())[:MAX_NAME] or "someone"
        session = approvals.sessions.open(name)
        response = RedirectResponse(target, 303, headers=HEADERS)
        response.set_cookie(COOKIE, session.id, httponly=True, samesite="strict", path="/ui",
                            max_age=int(approvals.sessions.lifetime))
        return response

    @ui.post("/logout")
    async def logout(request: Request) -> Response:
        session = approvals.sessions.get(request.cookies.get(COOKIE))
        form = await _form(request)
        if session is not None and session.csrf_ok(form.get("csrf")):
            approvals.sessions.close(session.id)
        response = RedirectResponse("/ui/login", 303, headers=HEADERS)
        response.delete_cookie(COOKIE, path="/ui")
        return response

    @ui.get("")
    async def index(request: Request) -> Response:
        session = session_of(request)
        if session is None:
            return to_login(request)
        store, now = approvals.store, time.time()
        return page(request, "index.html", {
            "session": session,
            "waiting": [_summary(r, now) for r in store.waiting()],
            "history": [_summary(r, now) for r in store.history()],
        })

    @ui.get("/repairs/{repair_id}")
    async def repair_page(request: Request, repair_id: str) -> Response:
        session = session_of(request)
        if session is None:
            return to_login(request)
        try:
            repair = approvals.store.get(repair_id)
        except UnknownRepair:
            return message(request, session, "No such repair",
                           "No pending repair has this address (or it is no longer kept).", 404, "/ui")
        # diffing and rendering a large source takes long: off the event loop, which keeps serving meanwhile
        return await asyncio.to_thread(lambda: page(request, "repair.html", _detail(repair, session)))

    @ui.get("/repairs/{repair_id}/state")
    async def repair_state(request: Request, repair_id: str) -> Response:
        """The repair's state as JSON, for `ui.js` to say that it changed while the page was open."""
        if session_of(request) is None:
            return JSONResponse({"detail": "log in first"}, 401, headers=HEADERS)
        try:
            repair = approvals.store.get(repair_id)
        except UnknownRepair:
            return JSONResponse({"detail": "unknown repair"}, 404, headers=HEADERS)
        data = state(approvals, repair, request).model_dump()
        data["events"] = len(repair.events)
        return JSONResponse(data, headers=HEADERS)

    @ui.post("/repairs/{repair_id}/decide")
    async def decide(request: Request, repair_id: str) -> Response:
        session = session_of(request)
        if session is None:
            return to_login(request)
        form = await _form(request)
        if session.id and not session.csrf_ok(form.get("csrf")):
            return message(request, session, "Not accepted",
                           "This form is out of date or did not come from this page (its CSRF token is wrong). "
                           "Reload the page and decide again.", 403, f"/ui/repairs/{repair_id}")
        back = f"/ui/repairs/{repair_id}"
        try:
            choice = _choice(form, session.name)
            await approvals.decide(repair_id, choice, DECIDE_WAIT_S)
        except UnknownRepair:
            return message(request, session, "No such repair", "No pending repair has this address.", 404, "/ui")
        except Conflict as error:
            return message(request, session, "Already decided", f"Your decision was not taken: {error}.", 409, back)
        except (InvalidChoice, ValueError) as error:
            return message(request, session, "Not a decision", f"Your decision was not taken: {error}.", 400, back)
        return RedirectResponse(back, 303, headers=HEADERS)

    return ui


async def _form(request: Request) -> dict[str, str]:
    """The fields of an `application/x-www-form-urlencoded` body (the only kind the page sends);
    the body's size is bounded by the service's `BodyLimit`, and a body with more fields than any form
    here has is read as empty (so it fails the CSRF check). Browsers send a text area's line ends as
    CRLF: they become LF."""
    body = (await request.body()).decode("utf-8", "replace")
    try:
        fields = parse_qs(body, keep_blank_values=True, max_num_fields=20)
    except ValueError:
        return {}
    return {name: values[-1].replace("\r\n", "\n") for name, values in fields.items()}


def _choice(form: dict[str, str], who: str) -> RepairChoice:
    choice = form.get("choice", "")
    if choice not in CHOICES:
        raise ValueError(f"unknown choice {choice[:40]!r}")
    candidate = form.get("candidate", "")
    kind = form.get("kind") or None
    return RepairChoice(
        choice=choice,  # type: ignore[arg-type]  # checked against CHOICES above
        candidate=int(candidate) if candidate.isdigit() else None,
        kind=kind if choice == "edit" and kind in EDIT_KINDS else None,  # type: ignore[arg-type]
        code=form.get("code", "") if choice == "edit" else "",
        force=form.get("force") == "on",
        by=who,
    )


def _local(target: str) -> str:
    """Where a login may send the browser on: a page of this service, never another site."""
    return target if target.startswith("/ui") and "//" not in target and "\\" not in target else "/ui"


def _same(given: str, expected: str) -> bool:
    return secrets.compare_digest(given.encode(), expected.encode())


def _ago(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def _clock(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) if at else ""


def _summary(repair: PendingRepair, now: float) -> dict[str, Any]:
    request = repair.request
    function = request.report.function
    ends = repair.created + request.deadline_s
    return {
        "id": repair.id,
        "job": request.job,
        "exception": request.report.exception.type,
        "where": f"{Path(function.filename).name}:{function.lineno}",
        "function": function.qualname,
        "status": repair.status.value,
        "created": repair.created,
        "waiting": _ago((repair.closed_at or now) - repair.created),
        "left": _ago(ends - now),
        "fallback": request.fallback,
        "then": FALLBACKS.get(request.fallback, request.fallback),
        "outcome": repair.outcome,
        "decided_by": repair.decided_by,
        "closed": _clock(repair.closed_at),
    }


_TRIAL = {True: "passed", None: "untried", False: "failed"}
"""A candidate's trial as the page styles it (`PendingCandidate.passed`)."""
_SHOWN_FIRST = ["passed", "untried", "failed"]
"""The order of the suggestions on the page: what the trial showed safe first, a failed trial last."""


def _edit_start(candidates: list[PendingCandidate]) -> PendingCandidate | None:
    """What the edit box starts from: the best (first ranked) suggestion a person could have written whose trial
    passed, applicable as it is; none (an empty box) when none passed, never one that failed its trial."""
    return next((c for c in candidates if c.passed and c.kind in EDIT_KINDS and c.code and not c.problems), None)


def _detail(repair: PendingRepair, session: Session) -> dict[str, Any]:
    """Everything the repair's page shows."""
    request, now = repair.request, time.time()
    report = request.report
    function = report.function
    candidates = []
    for number, candidate in enumerate(request.candidates):
        if candidate.kind == "surgery":
            diff = source_diff(function.source, candidate.code, function.first_lineno, function.name)
        else:
            diff = added(candidate.code) if candidate.code else []
        said = (candidate.verdict or "").removeprefix("trial: ")
        candidates.append({"index": number, "c": candidate, "diff": diff, "trial": _TRIAL[candidate.passed],
                           "said": said})
    candidates.sort(key=lambda item: _SHOWN_FIRST.index(str(item["trial"])))  # stable: the ranking within each
    refused = repair.refused if repair.refused is not None and repair.refused.choice == "edit" else None
    start = _edit_start(request.candidates)
    return {
        "session": session,
        "r": repair,
        "s": _summary(repair, now),
        "pending": request,
        "report": report,
        "context": in_context(function.source, function.first_lineno, function.lineno, function.statement),
        "whole": in_context(function.source, function.first_lineno, function.lineno, function.statement, 10**6),
        "candidates": candidates,
        "open": repair.status is Status.WAITING,
        "checking": repair.status is Status.PROPOSED,
        "proposed": describe(repair.choice, request) if repair.choice is not None else "",
        "edit_kind": refused.kind if refused else (start.kind if start else EDIT_KINDS[0]),
        "edit_kinds": EDIT_KINDS,
        "plain_choices": list(PLAIN_CHOICES.items()),
        "edit_code": refused.code if refused else (start.code if start else ""),
        "events": [(_clock(e.at), e.who, e.text) for e in repair.events],
        "variables": sorted(report.variables.items())[:200],
    }
