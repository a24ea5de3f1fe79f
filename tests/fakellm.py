"""A fake OpenAI-compatible model server on 127.0.0.1, replaying scripted replies over real HTTP.

It speaks the Chat Completions wire format (`POST /v1/chat/completions`, `GET /v1/models`) as
OpenAI, Ollama, vLLM and llama.cpp's server do, and records every request body (and when it came),
so tests can assert on the prompt, the `response_format`, `max_tokens`, the number of calls and
the time between them. A `Reply` says how to answer one request: content, tool calls (with or
without content), the reasoning a reasoning parser puts apart from the content, `finish_reason`,
a refusal, an error status with a body and headers, a delay, a body trickled out a few bytes at a
time, the completion sent as server-sent events although no stream was asked for, or a body that
is no completion at all. The server itself can reject `response_format` types with 400 and
unknown models with 404, each with the error body its real counterpart sends.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
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
    reasoning: the model's reasoning, sent apart from the content in the field `reasoning_field`
    (`reasoning_content`: vLLM up to 0.10 with `--reasoning-parser`, llama.cpp's server with
    `--reasoning-format deepseek`, DeepSeek's API; `reasoning`: vLLM from 0.11, OpenRouter).
    headers: response headers (`Retry-After` on a 429). events: the completion sent as
    `text/event-stream` chunks (`chat.completion.chunk` deltas, then `data: [DONE]`) whatever the
    request asked, as some gateways and small servers do. body, media_type: a raw body sent
    instead of any completion (a proxy's HTML page, another API's JSON), with `status`.
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
    reasoning: str | None = None
    reasoning_field: str = "reasoning_content"
    headers: dict[str, str] = field(default_factory=dict)
    events: bool = False
    body: str | None = None
    media_type: str = "application/json"


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
        self.times: list[float] = []
        """`time.monotonic()` when each request came."""
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
            self.times.append(time.monotonic())
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
        if reply.body is not None:
            return Response(reply.body, reply.status, media_type=reply.media_type, headers=reply.headers)
        if reply.status != 200:
            return JSONResponse(reply.error or openai_error("error"), status_code=reply.status, headers=reply.headers)
        if reply.events:
            events = _events(body["model"], reply)
            return Response(events, media_type="text/event-stream", headers=reply.headers)
        payload = json.dumps(_completion(body["model"], reply)).encode()
        if reply.trickle:
            return StreamingResponse(self._trickled(request, payload, reply.trickle), media_type="application/json")
        return Response(payload, media_type="application/json", headers=reply.headers)

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
    if reply.reasoning is not None:
        message[reply.reasoning_field] = reply.reasoning
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


def _events(model: str, reply: Reply) -> str:
    """The reply as a stream of `chat.completion.chunk` events: the role, the reasoning and the
    content in pieces of 16 characters, each tool call's name then its arguments in pieces, the
    finish reason, the usage, and `[DONE]` (the shape OpenAI documents for `stream: true`)."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        data = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [choice],
        }
        return f"data: {json.dumps(data)}\n\n"

    def pieces(text: str) -> list[str]:
        return [text[i : i + 16] for i in range(0, len(text), 16)]

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({reply.reasoning_field: piece}) for piece in pieces(reply.reasoning or "")]
    events += [chunk({"content": piece}) for piece in pieces(reply.content or "")]
    for index, (name, arguments) in enumerate(reply.tool_calls):
        start = {"index": index, "id": f"call_{index}", "type": "function", "function": {"name": name, "arguments": ""}}
        events.append(chunk({"tool_calls": [start]}))
        events += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}) for piece in pieces(arguments)
        ]
    events.append(chunk({}, reply.finish_reason))
    usage = {"prompt_tokens": reply.usage[0], "completion_tokens": reply.usage[1], "total_tokens": sum(reply.usage)}
    last = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": model, "choices": []}
    events.append(f"data: {json.dumps(last | {'usage': usage})}\n\n")  # with stream_options.include_usage
    return "".join(events) + "data: [DONE]\n\n"
