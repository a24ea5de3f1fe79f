"""Shared helpers for the repair-bot tests: real crashes, and a real server in a thread."""

from __future__ import annotations

import ast
import inspect
import textwrap
import traceback
from contextlib import contextmanager
from typing import Any
from collections.abc import Callable, Iterator

from daifu.config import Settings
from daifu.core.crash import Crash
from daifu.core.handling import RepairContext
from daifu.store import record
from daifu.report.build import build_report
from repairbot.protocol import CrashReport, Culprit, Diagnosis, SuggestResponse, Suggestion


def crash_from(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Crash:
    """Run `fn`, which must raise, and describe the crash as the runtime would."""
    try:
        fn(*args, **kwargs)
    except Exception as error:
        frame, lineno = next((f, n) for f, n in traceback.walk_tb(error.__traceback__) if f.f_code is fn.__code__)
        lines, first = inspect.getsourcelines(fn)
        return Crash(
            exception=error,
            function_name=fn.__name__,
            qualname=fn.__qualname__,
            source="".join(lines),
            filename=fn.__code__.co_filename,
            first_lineno=first,
            lineno=lineno,
            statement=_statement("".join(lines), first, lineno),
            kind="statement",
            locals=dict(frame.f_locals),
            globals=frame.f_globals,
            attempt=1,
            tried=[],  # the runtime's own account, which a decider adds to through its context
        )
    raise AssertionError(f"{fn.__qualname__} didn't raise at all")


def context_for(crash: Crash, settings: Settings) -> RepairContext:
    """What the runtime hands the deciders of `crash` beside it: its settings, a record entry, its account of
    what was tried (the crash's own list, as the runtime shares it)."""
    return RepairContext(settings, record.begin(crash, settings), crash.tried)  # type: ignore[arg-type]


def _statement(source: str, first: int, lineno: int) -> str:
    """The source lines of the innermost simple statement at file line `lineno`."""
    target = lineno - first + 1
    tree = ast.parse(textwrap.dedent(source))
    spans = [
        (n.lineno, n.end_lineno or n.lineno)
        for n in ast.walk(tree)
        if isinstance(n, ast.stmt) and not hasattr(n, "body") and n.lineno <= target <= (n.end_lineno or n.lineno)
    ]
    start, end = min(spans, key=lambda s: s[1] - s[0]) if spans else (target, target)
    return "".join(source.splitlines(keepends=True)[start - 1 : end])


def report_of(fn: Callable[..., Any], *args: Any) -> CrashReport:
    return build_report(crash_from(fn, *args))


def surgery_function(suggestion: Suggestion, fn: Callable[..., Any]) -> Callable[..., Any]:
    """The function a surgery's source defines, compiled in `fn`'s module."""
    assert suggestion.kind == "surgery", suggestion
    namespace = dict(fn.__globals__)
    exec(compile(textwrap.dedent(suggestion.code), fn.__code__.co_filename, "exec"), namespace)
    return namespace[fn.__name__]


def run_action_then_statement(suggestion: Suggestion, crash: Crash, fn: Callable[..., Any]) -> dict[str, Any]:
    """Do what the runtime does with an action: run it in the frame's namespace, then the statement."""
    assert suggestion.kind == "action", suggestion
    namespace = dict(crash.locals)
    globals_ = dict(fn.__globals__)
    exec(suggestion.code, globals_, namespace)
    exec(textwrap.dedent(crash.statement), globals_, namespace)
    return namespace


class FakeChatServer:
    """An OpenAI-compatible Chat Completions endpoint answering from a script, on 127.0.0.1.

    `script(prompt)` returns a reply: a string (the message content), or a `(status, body)` pair,
    or a float to sleep that many seconds before answering `{}`. `prompts` keeps every prompt received.
    """

    def __init__(self, script: Callable[[str], Any]) -> None:
        from starlette.applications import Starlette
        from starlette.routing import Route

        self.script = script
        self.prompts: list[str] = []
        self.authorizations: list[str] = []
        self.app = Starlette(routes=[Route("/v1/chat/completions", self._complete, methods=["POST"])])

    async def _complete(self, request: Any) -> Any:
        import asyncio

        from starlette.responses import JSONResponse

        body = await request.json()
        prompt = body["messages"][-1]["content"]
        self.prompts.append(prompt)
        self.authorizations.append(request.headers.get("authorization", ""))
        reply = self.script(prompt)
        if isinstance(reply, float):
            await asyncio.sleep(reply)
            reply = "{}"
        if isinstance(reply, tuple):
            status, payload = reply
            return JSONResponse(payload, status_code=status, headers={"retry-after-ms": "10"})
        return JSONResponse(
            {
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": reply}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )


class ScriptedBot:
    """A repair bot answering `/v1/suggest` with whatever `suggestions` holds, keeping every request body.

    Serve `app` with `repairbot.server.serve_in_thread`: it is what a hostile or broken bot looks like
    to the client, over real HTTP.
    """

    def __init__(self) -> None:
        from fastapi import FastAPI, Request

        self.suggestions: list[Suggestion] = []
        self.requests: list[bytes] = []
        self.app = FastAPI()

        async def suggest(request: Request) -> SuggestResponse:
            self.requests.append(await request.body())
            culprit = Culprit(function="train", filename="train.py", lineno=1, reason="it is wrong")
            return SuggestResponse(
                fingerprint="0" * 20,
                diagnosis=Diagnosis(category="unknown", culprit=culprit, explanation="Apply this fix."),
                backend_used="scripted",
                suggestions=self.suggestions,
            )

        suggest.__annotations__ = {"request": Request, "return": SuggestResponse}  # FastAPI reads real types
        self.app.post("/v1/suggest")(suggest)


@contextmanager
def served_scripted_bot() -> Iterator[tuple[ScriptedBot, str]]:
    """A `ScriptedBot` served over HTTP on loopback while the block runs: the bot, and its URL."""
    from repairbot.server import serve_in_thread

    bot = ScriptedBot()
    url, stop = serve_in_thread(bot.app)
    try:
        yield bot, url
    finally:
        stop()
