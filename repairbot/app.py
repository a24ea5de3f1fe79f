"""The repair bot's HTTP API (FastAPI); OpenAPI docs at `/docs`, served without any CDN.

`app` is configured from the environment when imported (`uvicorn repairbot.app:app`):
`DAIFU_REPAIRBOT_BACKEND` (default `rules`), `DAIFU_REPAIRBOT_TOKEN` (a bearer token the
`/v1` endpoints then require) and `DAIFU_BOT_DEADLINE` (seconds per crash, default 45).
`create_app` builds one with explicit settings, for tests and `repairbot.server`.

Each request is bounded: its body in bytes (413) and in the time it takes to arrive (408), its shape
beyond the schema (422, see
`repairbot.admission`), the text analysis reads and the size of its answer (`repairbot.bounds`),
and its time: analysis runs on a few worker threads, off the event loop, under one deadline per
crash (the server's, or the client's `deadline_s` if shorter) that the backend sizes its model
call by; a request whose answer is not ready within it gets 503 at once, and a client that goes
away cancels the work (499). `/healthz` answers meanwhile.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from fastapi_offline import FastAPIOffline
from loguru import logger

from repairbot.approvals import Approvals, router as pending_router
from repairbot.admission import Inadmissible, Problem, admit, check_sources, printable
from repairbot.backends.base import Answer, Backend
from repairbot.backends.registry import NAMES, UnknownBackend, make_backend
from repairbot.bounds import MAX_ANSWER, bounded_diagnosis, bounded_suggestions, bounded_transcript, cut
from repairbot.cache import AnswerCache
from repairbot.deadline import Cancelled, Deadline, for_request, server_default
from repairbot.protocol import fingerprint
from repairbot.ui import router as ui_router
from repairbot.limits import BODY_SECONDS, BodyLimit
from repairbot.protocol import (
    BackendsResponse,
    CrashRequest,
    DiagnoseResponse,
    ErrorResponse,
    Health,
    SuggestResponse,
    ValidationErrorResponse,
)

MAX_BODY = 512 * 1024
BUDGET_S = 60.0
"""Seconds a request may wait for its answer when the client gives no shorter `deadline_s`."""
WORKERS = 4
"""Threads running analyses; more requests wait for one, within their budget."""

_UNAUTHORIZED: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "The bearer token is missing or wrong."}
}
_ANALYSIS_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "The request names a backend this server does not know."},
    **_UNAUTHORIZED,
    408: {"model": ErrorResponse, "description": "The request body did not all arrive in time (`body_seconds`)."},
    413: {"model": ErrorResponse, "description": "The request body is larger than the server accepts."},
    422: {
        "model": ValidationErrorResponse,
        "description": "The request does not follow the schema, or cannot be analysed (each field at fault named).",
    },
    503: {
        "model": ErrorResponse,
        "description": "No answer within the request's budget (the server's, or `deadline_s`); retry later.",
    },
}


def create_app(
    backend: str | Backend | None = None,
    *,
    token: str | None = None,
    max_body: int = MAX_BODY,
    body_seconds: float = BODY_SECONDS,
    cache_seconds: float = 30.0,
    deadline: float | None = None,
    cache_entries: int = 256,
    cache_bytes: int = 16 * 2**20,
    budget_s: float = BUDGET_S,
    workers: int = WORKERS,
    ui_token: str | None = None,
    notify_url: str | None = None,
    public_url: str | None = None,
) -> FastAPI:
    """A repair-bot application.

    backend: the default backend, by name or as an object (`DAIFU_REPAIRBOT_BACKEND` or `rules`
        if not given); a request may name another. An unknown name raises `UnknownBackend` here.
    token: the bearer token required on `/v1` (`DAIFU_REPAIRBOT_TOKEN` if not given; none required
        if neither is set). max_body: larger request bodies get 413. body_seconds: a request whose
        body has not all arrived this long after it began gets 408.
    cache_seconds, cache_entries, cache_bytes: how long, and how many answers in how many bytes,
        the answer cache keeps (its key is the whole request).
    deadline: the most seconds spent on one crash (`DAIFU_BOT_DEADLINE` or 45 if not given); a
        request's `deadline_s` may ask for less. budget_s: an upper bound on any request's wait.
    workers: threads running analyses at once.
    ui_token: the token a person logs in to the approval page with, when the service has no `token`
        (`daifu serve` makes one); with neither, nobody can decide pending repairs here.
    notify_url, public_url: the webhook told of each repair that starts waiting (`DAIFU_NOTIFY_URL`),
        and the address people reach this service at, for links (`DAIFU_PUBLIC_URL`); see
        `repairbot.approvals`.
    Always added: `/healthz` (no token), offline `/docs` and `/redoc`, and 422 answers that name each
    wrong field.
    """
    default = backend if backend is not None else os.environ.get("DAIFU_REPAIRBOT_BACKEND") or "rules"
    backends: dict[str, Backend] = {}
    if not isinstance(default, str):
        backends[default.name] = default
    default_name = default if isinstance(default, str) else default.name
    expected = token if token is not None else os.environ.get("DAIFU_REPAIRBOT_TOKEN") or None
    cache: AnswerCache[Answer] = AnswerCache(
        _answer_size, ttl=cache_seconds, max_entries=cache_entries, max_bytes=cache_bytes
    )
    executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="repairbot-analysis")
    longest = min(deadline if deadline is not None else server_default(), budget_s)

    def get_backend(name: str | None) -> Backend:
        name = name or default_name
        if name not in backends:
            backends[name] = make_backend(name)
        return backends[name]

    get_backend(default_name)  # an unknown default is a configuration error, raised now

    def chosen_backend(name: str | None) -> Backend:
        try:
            return get_backend(name)
        except UnknownBackend as error:
            raise HTTPException(400, str(error)) from None

    def authorized(request: Request) -> None:
        if expected is None:
            return
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(given.encode(), expected.encode()):
            raise HTTPException(401, "A valid bearer token is required.", headers={"WWW-Authenticate": "Bearer"})

    async def answer(kind: str, body: CrashRequest, request: Request) -> tuple[Answer, bool, str]:
        chosen = chosen_backend(body.backend)
        key = hashlib.sha256(f"{kind}\0{chosen.name}\0".encode() + admit(body)).hexdigest()
        deadline = for_request(body.deadline_s, longest)
        call = chosen.suggest if kind == "suggest" else chosen.diagnose

        # passed only when asked, so that a backend written before questions answers every other request
        asked: dict[str, Any] = {"question": body.question, "conversation": body.conversation}
        asked = asked if body.question or body.conversation else {}

        def work() -> Answer:
            check_sources(body.report)
            return _bounded(call(body.report, deadline, **asked))

        async def compute() -> Answer:
            running = asyncio.get_running_loop().run_in_executor(executor, work)
            return await _until_disconnected(request, deadline, running)

        try:
            result, cached = await asyncio.wait_for(cache.get(key, compute), deadline.seconds)
        except asyncio.TimeoutError:
            deadline.cancel()
            raise HTTPException(
                503,
                f"No answer from the {chosen.name} backend within this request's budget of {deadline.seconds:g} s "
                f"({cache.running} analyses in progress); retry later.",
                headers={"Retry-After": "5"},
            ) from None
        except Cancelled:  # the client is gone; nothing is kept for the next one
            raise HTTPException(499, "The client closed the request before the answer was ready.") from None
        crash_id = fingerprint(body.report)
        if result.fallback_reason and not cached:
            logger.warning("Crash {}: {}", crash_id, result.fallback_reason)
        return result, cached, crash_id

    app = FastAPIOffline(title="DaiFu repair bot", version="1", description=__doc__)
    app.add_middleware(BodyLimit, max_bytes=max_body, seconds=body_seconds)
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(Inadmissible, _inadmissible)  # type: ignore[arg-type]

    @app.get("/healthz", response_model=Health)
    async def healthz() -> Health:
        """Whether the service answers, and whether its default backend can work now (no token needed):
        configured, and its model endpoint reachable (probed in a worker thread: the loop stays free)."""
        info = await run_in_threadpool(get_backend(default_name).info)
        return Health(
            status="ok" if info.available else "degraded",
            backend=default_name,
            available=info.available,
            detail=info.detail,
        )

    @app.get(
        "/v1/backends", response_model=BackendsResponse, dependencies=[Depends(authorized)], responses=_UNAUTHORIZED
    )
    async def list_backends() -> BackendsResponse:
        """The backends this server can use, and whether each can work now (configured, reachable)."""
        infos = [await run_in_threadpool(get_backend(name).info) for name in NAMES]
        return BackendsResponse(default=default_name, backends=infos)

    @app.post(
        "/v1/diagnose", response_model=DiagnoseResponse, dependencies=[Depends(authorized)], responses=_ANALYSIS_ERRORS
    )
    async def diagnose(body: CrashRequest, request: Request) -> DiagnoseResponse:
        """The root cause: which function among the frames is the culprit and why, and the traceback explained."""
        result, cached, crash_id = await answer("diagnose", body, request)
        return DiagnoseResponse(
            fingerprint=crash_id,
            diagnosis=result.diagnosis,
            backend_used=result.backend_used,
            fallback_reason=result.fallback_reason,
            cached=cached,
            notes=result.notes,
            answer=result.answer,
            transcript=result.transcript,
        )

    @app.post(
        "/v1/suggest", response_model=SuggestResponse, dependencies=[Depends(authorized)], responses=_ANALYSIS_ERRORS
    )
    async def suggest(body: CrashRequest, request: Request) -> SuggestResponse:
        """The diagnosis, and repairs ranked best first (at most 8, each once)."""
        result, cached, crash_id = await answer("suggest", body, request)
        return SuggestResponse(
            fingerprint=crash_id,
            diagnosis=result.diagnosis,
            suggestions=result.suggestions,
            backend_used=result.backend_used,
            fallback_reason=result.fallback_reason,
            cached=cached,
            notes=result.notes,
            answer=result.answer,
            transcript=result.transcript,
        )

    approvals = Approvals(
        token=expected or ui_token,
        notify_url=notify_url or os.environ.get("DAIFU_NOTIFY_URL") or None,
        public_url=public_url or os.environ.get("DAIFU_PUBLIC_URL") or None,
    )
    app.include_router(pending_router(approvals, authorized))
    app.include_router(ui_router(approvals))
    return app


async def _until_disconnected(request: Request, deadline: Deadline, work: Awaitable[Answer]) -> Answer:
    """`work`'s result; meanwhile, if the client disconnects, `deadline` is cancelled so the backend stops."""
    task = asyncio.ensure_future(work)
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=0.05)
            if not task.done() and not deadline.cancelled and await request.is_disconnected():
                deadline.cancel()
    except asyncio.CancelledError:  # nobody waits any more: work not started yet never starts
        task.cancel()
        deadline.cancel()
        raise
    return task.result()


def _bounded(answer: Answer) -> Answer:
    """Any backend's answer, cut to the bounds of `repairbot.bounds`."""
    return replace(
        answer,
        diagnosis=bounded_diagnosis(answer.diagnosis),
        suggestions=bounded_suggestions(answer.suggestions),
        fallback_reason=None if answer.fallback_reason is None else cut(answer.fallback_reason, 2000),
        answer=None if answer.answer is None else cut(answer.answer, MAX_ANSWER),
        transcript=None if answer.transcript is None else bounded_transcript(answer.transcript),
    )


def _answer_size(answer: Answer) -> int:
    """Bytes an answer holds, about as sent."""
    extra = len(answer.transcript.model_dump_json()) if answer.transcript else 0
    return (
        len(answer.diagnosis.model_dump_json())
        + sum(len(s.model_dump_json()) for s in answer.suggestions)
        + len(answer.answer or "")
        + extra
    )


async def _validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
    """422 naming each wrong field, without echoing the input back (it may be large)."""
    problems = [Problem(tuple(e.get("loc", ())), e.get("msg", ""), e.get("type", "")) for e in error.errors()[:20]]
    return _problems_response(problems, "Malformed request")


async def _inadmissible(request: Request, error: Inadmissible) -> JSONResponse:
    return _problems_response(error.problems, "Cannot analyse this request")


def _problems_response(problems: list[Problem], title: str) -> JSONResponse:
    problems = [Problem(tuple(printable(p) for p in item.loc), printable(item.msg), item.type) for item in problems]
    summary = "; ".join(f"{'.'.join(str(p) for p in item.loc)}: {item.msg}" for item in problems)
    detail = [{"loc": list(item.loc), "msg": item.msg, "type": item.type} for item in problems]
    return JSONResponse({"detail": detail, "message": f"{title}: {summary}"}, status_code=422)


app = create_app()
