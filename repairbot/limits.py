"""ASGI middleware refusing request bodies over a size limit (413) or slower than a time limit (408),
before any parsing."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from collections.abc import Awaitable, Callable

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


BODY_SECONDS = 30.0
"""Seconds a request's whole body may take to arrive: a client trickling it would otherwise hold a
connection and its buffer for as long as it likes."""


class BodyLimit:
    """Reads each HTTP request's body (at most `max_bytes`, within `seconds`) before the app does.

    A declared `Content-Length` over the limit is refused without reading; a chunked body is
    refused as soon as it passes the limit; a body not all there `seconds` after the request began
    is refused with 408. The app then receives the body as usual.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, seconds: float = BODY_SECONDS) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await _respond(send, 413, f"Request body is larger than {self.max_bytes} bytes.")
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.seconds
        chunks, size, more = [], 0, True
        while more:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                await _respond(send, 408, f"The request body did not arrive within {self.seconds:g} s.")
                return
            if message["type"] != "http.request":
                await self.app(scope, _replay([message]), send)
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                await _respond(send, 413, f"Request body is larger than {self.max_bytes} bytes.")
                return
            more = message.get("more_body", False)
        await self.app(
            scope, _replay([{"type": "http.request", "body": b"".join(chunks), "more_body": False}], receive), send
        )


async def _respond(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 408:
        headers.append((b"connection", b"close"))  # what is left of the body must not be read as a request
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _replay(messages: list[Message], then: Receive | None = None) -> Receive:
    """A `receive` giving `messages` first, then the real `receive` (for the disconnect)."""
    queue = list(messages)

    async def receive() -> Message:
        if queue:
            return queue.pop(0)
        if then is None:
            return {"type": "http.disconnect"}
        return await then()

    return receive
