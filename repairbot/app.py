"""The repair bot's HTTP API (FastAPI); OpenAPI docs at `/docs`.

`app` is configured from the environment when imported (`uvicorn repairbot.app:app`):
`DAIFU_REPAIRBOT_BACKEND` (default `rules`), `DAIFU_REPAIRBOT_TOKEN` (a bearer token the
`/v1` endpoints then require) and `DAIFU_BOT_DEADLINE` (seconds per crash, default 45).
`create_app` builds one with explicit settings, for tests and `repairbot.server`.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Awaitable, Callable

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from loguru import logger
from starlette.concurrency import run_in_threadpool

from repairbot.protocol import CrashReport, fingerprint
from repairbot.backends import NAMES, Answer, Backend, UnknownBackend, make_backend
from repairbot.cache import Coalescer
from repairbot.deadline import Cancelled, Deadline, for_request, server_default
from repairbot.limits import BodyLimit
from repairbot.protocol import BackendsResponse, CrashRequest, DiagnoseResponse, Health, SuggestResponse

MAX_BODY = 512 * 1024


def create_app(
    backend: str | Backend | None = None,
    *,
    token: str | None = None,
    max_body: int = MAX_BODY,
    cache_seconds: float = 30.0,
    deadline: float | None = None,
) -> FastAPI:
    """A repair-bot application.

    backend: the default backend, by name or as an object (`DAIFU_REPAIRBOT_BACKEND` or `rules`
        if not given); a request may name another. token: the bearer token required on `/v1`
        (`DAIFU_REPAIRBOT_TOKEN` if not given; none required if neither is set). max_body: larger
        request bodies get 413. cache_seconds: how long an answer serves identical reports.
        deadline: the most seconds spent on one crash (`DAIFU_BOT_DEADLINE` or 45 if not given);
        a request's `deadline_s` may ask for less.
    Always added: `/healthz` (no token), and 422 answers that say which field is wrong.
    """
    default = backend if backend is not None else os.environ.get("DAIFU_REPAIRBOT_BACKEND") or "rules"
    backends: dict[str, Backend] = {}
    if not isinstance(default, str):
        backends[default.name] = default
    default_name = default if isinstance(default, str) else default.name
    expected = token if token is not None else os.environ.get("DAIFU_REPAIRBOT_TOKEN") or None
    cache: Coalescer[Answer] = Coalescer(cache_seconds)
    longest = deadline if deadline is not None else server_default()

    def get_backend(name: str | None) -> Backend:
        name = name or default_name
        if name not in backends:
            try:
                backends[name] = make_backend(name)
            except UnknownBackend as error:
                raise HTTPException(400, str(error)) from None
        return backends[name]

    def authorized(request: Request) -> None:
        if expected is None:
            return
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(given.encode(), expected.encode()):
            raise HTTPException(401, "A valid bearer token is required.", headers={"WWW-Authenticate": "Bearer"})

    async def answer(kind: str, body: CrashRequest, request: Request) -> tuple[Answer, bool, str]:
        chosen = get_backend(body.backend)
        crash_id = fingerprint(body.report)
        call: Callable[[CrashReport, Deadline], Answer] = chosen.suggest if kind == "suggest" else chosen.diagnose
        deadline = for_request(body.deadline_s, longest)

        async def compute() -> Answer:
            return await _until_disconnected(request, deadline, run_in_threadpool(call, body.report, deadline))

        try:
            result, cached = await cache.get(f"{kind}:{chosen.name}:{crash_id}", compute)
        except Cancelled:  # the client is gone; nothing is kept for the next one
            raise HTTPException(499, "The client closed the request before the answer was ready.") from None
        if result.fallback_reason and not cached:
            logger.warning("Crash {}: {}", crash_id, result.fallback_reason)
        return result, cached, crash_id

    app = FastAPI(title="DaiFu repair bot", version="1", description=__doc__)
    app.add_middleware(BodyLimit, max_bytes=max_body)
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]

    @app.get("/healthz", response_model=Health)
    async def healthz() -> Health:
        return Health(backend=default_name)

    @app.get("/v1/backends", response_model=BackendsResponse, dependencies=[Depends(authorized)])
    async def list_backends() -> BackendsResponse:
        return BackendsResponse(default=default_name, backends=[get_backend(n).info() for n in NAMES])

    @app.post("/v1/diagnose", response_model=DiagnoseResponse, dependencies=[Depends(authorized)])
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
        )

    @app.post("/v1/suggest", response_model=SuggestResponse, dependencies=[Depends(authorized)])
    async def suggest(body: CrashRequest, request: Request) -> SuggestResponse:
        """The diagnosis, and repairs ranked best first."""
        result, cached, crash_id = await answer("suggest", body, request)
        return SuggestResponse(
            fingerprint=crash_id,
            diagnosis=result.diagnosis,
            suggestions=result.suggestions,
            backend_used=result.backend_used,
            fallback_reason=result.fallback_reason,
            cached=cached,
            notes=result.notes,
        )

    return app


async def _until_disconnected(request: Request, deadline: Deadline, work: Awaitable[Answer]) -> Answer:
    """`work`'s result; meanwhile, if the client disconnects, `deadline` is cancelled so the backend stops."""
    task = asyncio.ensure_future(work)
    while not task.done():
        await asyncio.wait({task}, timeout=0.05)
        if not task.done() and not deadline.cancelled and await request.is_disconnected():
            deadline.cancel()
    return task.result()


async def _validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
    """422 naming each wrong field, without echoing the input back (it may be large)."""
    problems = [
        {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")} for e in error.errors()[:20]
    ]
    summary = "; ".join(f"{'.'.join(str(p) for p in item['loc'])}: {item['msg']}" for item in problems)
    return JSONResponse({"detail": problems, "message": f"Malformed request: {summary}"}, status_code=422)


app = create_app()
