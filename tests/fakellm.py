"""A fake OpenAI-compatible model server on 127.0.0.1, replaying scripted replies over real HTTP.

It speaks the Chat Completions wire format (`POST /v1/chat/completions`, `GET /v1/models`) as
OpenAI, Ollama, vLLM and llama.cpp's server do, and records every request body, so tests can
assert on the prompt, the `response_format`, `max_tokens` and the number of calls. A `Reply` says
how to answer one request: content, tool calls with empty content, `finish_reason`, a refusal,
an error status with a body, a delay, or a body trickled out a few bytes at a time. The server
itself can reject `response_format` types with 400 and unknown models with 404, each with the
error body its real counterpart sends.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from repairbot.server import serve_in_thread


@dataclass
class Reply:
    """How the fake model answers one request.

    content: the message text (`None` sends `"content": null`). tool_calls: `(name, arguments)`
    pairs, sent as the message's `tool_calls`. status/error: a non-200 answer with this JSON body.
    delay: seconds to wait before answering. trickle: seconds between chunks of the body (8
    bytes each), as a slow server or a slow proxy sends it. usage: `(prompt_tokens,
    completion_tokens)` as the server counts them (zeros, as some local servers send, if not given).
    """

    content: str | None = ""
    tool_calls: list[tuple[str, str]] = field(default_factory=list)
    finish_reason: str = "stop"
    refusal: str | None = None
    status: int = 200
    error: dict[str, Any] | None = None
    delay: float = 0.0
    trickle: float = 0.0
    usage: tuple[int, int] = (0, 0)


Script = Callable[[dict[str, Any]], "Reply | str"]


def openai_error(message: str, kind: str = "invalid_request_error", param: str | None = None) -> dict[str, Any]:
    """An error body as OpenAI (and servers copying it: Ollama, llama.cpp, LM Studio) send it."""
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}


class FakeLLM:
    """An OpenAI-compatible server answering from a script, recording what it is sent.

    replies: `Reply`s (or plain strings, the content) used in order, the last one repeated; or a
        function of the request body returning one. models: the names it serves; any other gets
        404 as Ollama words it. rejects: `response_format` types answered with 400.
    Use as a context manager; `url` is the base URL including `/v1`.
    """

    def __init__(
        self,
        replies: Iterable[Reply | str] | Script = (),
        *,
        models: tuple[str, ...] = ("test-model",),
        rejects: tuple[str, ...] = (),
    ) -> None:
        self._script = replies if callable(replies) else None
        self._queue = [] if callable(replies) else list(replies)
        self.models = models
        self.rejects = rejects
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.disconnects = 0
        self._lock = threading.Lock()
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._complete, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
            ]
        )
        self.url = ""
        self._stop: Callable[[], None] | None = None

    def __enter__(self) -> FakeLLM:
        root, self._stop = serve_in_thread(self.app)
        self.url = root + "/v1"
        return self

    def __exit__(self, *_: object) -> None:
        if self._stop is not None:
            self._stop()

    @property
    def prompts(self) -> list[str]:
        """The user message of each request received."""
        return [r["messages"][-1]["content"] for r in self.requests]

    def script(self, replies: Iterable[Reply | str] | Script) -> None:
        """Answer the next requests with `replies` instead."""
        with self._lock:
            self._script = replies if callable(replies) else None
            self._queue = [] if callable(replies) else list(replies)

    def _next(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            if self._script is not None:
                chosen = self._script(body)
            elif not self._queue:
                chosen = Reply(content="")
            else:
                chosen = self._queue.pop(0) if len(self._queue) > 1 else self._queue[0]
        return chosen if isinstance(chosen, Reply) else Reply(content=chosen)

    async def _models(self, request: Request) -> Response:
        data = [{"id": name, "object": "model", "created": 0, "owned_by": "fake"} for name in self.models]
        return JSONResponse({"object": "list", "data": data})

    async def _complete(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            self.requests.append(body)
            self.headers.append(dict(request.headers))
        if body.get("model") not in self.models:
            message = f'model "{body.get("model")}" not found, try pulling it first'
            return JSONResponse(openai_error(message, "api_error"), status_code=404)
        kind = (body.get("response_format") or {}).get("type")
        if kind in self.rejects:
            message = f"Invalid parameter: 'response_format' of type '{kind}' is not supported with this model."
            return JSONResponse(openai_error(message, param="response_format"), status_code=400)
        reply = self._next(body)
        if reply.delay and await self._wait(request, reply.delay):
            return Response(status_code=499)
        if reply.status != 200:
            return JSONResponse(reply.error or openai_error("error"), status_code=reply.status)
        payload = json.dumps(_completion(body["model"], reply)).encode()
        if reply.trickle:
            return StreamingResponse(self._trickled(request, payload, reply.trickle), media_type="application/json")
        return Response(payload, media_type="application/json")

    async def _wait(self, request: Request, seconds: float) -> bool:
        """Sleep `seconds`, watching the connection; `True` if the client went away first."""
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while loop.time() < end:
            await asyncio.sleep(min(0.05, end - loop.time()))
            if await request.is_disconnected():
                with self._lock:
                    self.disconnects += 1
                return True
        return False

    async def _trickled(self, request: Request, payload: bytes, every: float) -> AsyncIterator[bytes]:
        for start in range(0, len(payload), 8):
            yield payload[start : start + 8]
            if await self._wait(request, every):
                return


def _completion(model: str, reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": reply.refusal}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": arguments}}
            for i, (name, arguments) in enumerate(reply.tool_calls)
        ]
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "finish_reason": reply.finish_reason, "message": message}],
        "usage": {
            "prompt_tokens": reply.usage[0],
            "completion_tokens": reply.usage[1],
            "total_tokens": sum(reply.usage),
        },
    }
