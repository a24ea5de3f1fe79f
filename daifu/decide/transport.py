"""One HTTP client for the repair bot service: its token, its errors, its routes.

Two parts of the runtime talk to the service: the bot client asks it about a crash
(`daifu.decide.botclient`), and `approve="remote"` posts a pending repair and waits on it
(`daifu.decide.remote`). Both send the same token (`DAIFU_REPAIRBOT_TOKEN`, as a bearer token), meet
the same failures, told apart by the same exceptions, and read what the server said about an error
status the same way; the routes are the protocol's (`repairbot.protocol`), which the service serves.
"""

from __future__ import annotations

import json
import os
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel, ValidationError

if TYPE_CHECKING:
    import httpx

TOKEN_VARIABLE = "DAIFU_REPAIRBOT_TOKEN"
KEY_HEADER = "X-DaiFu-Key"
"""The header a waiting process sends its repair's key in (the service checks it: `repairbot.approvals`)."""
MAX_DETAIL_BYTES = 2048
"""An error body longer than this is not quoted: no error of the service's is that long."""

Model = TypeVar("Model", bound=BaseModel)


class ServiceFailed(Exception):
    """The service's answer could not be used; the message says why, in a few words."""


class Unreachable(ServiceFailed):
    """No HTTP exchange with the server: refused, reset, a name that does not resolve..."""


class DeadlineExceeded(ServiceFailed):
    """The whole call took longer than its deadline."""


class ReplyTooLarge(ServiceFailed):
    """The reply declared, or sent, more bytes than the client reads."""


class ErrorStatus(ServiceFailed):
    """The server answered with an HTTP error status; `status` is it, `detail` what the server said."""

    def __init__(self, status: int, detail: str = "") -> None:
        super().__init__(f"HTTP {status}" + (f": {detail}" if detail else ""))
        self.status, self.detail = status, detail


class BadReply(ServiceFailed):
    """The reply is not the protocol's JSON."""


def headers(json_body: bool = False) -> dict[str, str]:
    """The headers of every request: the service's token, if one is set, and the body's type."""
    found = {"Content-Type": "application/json"} if json_body else {}
    token = os.environ.get(TOKEN_VARIABLE)
    if token:
        found["Authorization"] = f"Bearer {token}"
    return found


def http_library() -> ModuleType:
    """httpx, loaded by the first call to a service: automatic mode with the embedded rules engine never
    loads it (a third of a second of CPU, most of it httpx's own command line: click, rich, pygments);
    `ServiceFailed` when it is not installed, so that the embedded rules engine answers instead."""
    try:
        import httpx
    except ImportError as missing:
        raise ServiceFailed(f"the repair bot's client is not installed ({missing}): pip install 'daifu[bot]'") from None
    return httpx


def unreachable(error: httpx.HTTPError) -> Unreachable:
    """A transport error of httpx as `Unreachable`, its message naming what happened."""
    return Unreachable(f"{type(error).__name__}: {error}" if str(error) else type(error).__name__)


def error_detail(body: bytes) -> str:
    """What the server said about its error status: the `message` or `detail` of its JSON body, bounded;
    `""` for any other body (a proxy's page, a hostile server's noise: never quoted)."""
    if len(body) > MAX_DETAIL_BYTES:
        return ""
    try:
        said = json.loads(body)
    except ValueError:
        return ""
    text = said.get("message") or said.get("detail") if isinstance(said, dict) else None
    return text[:300] if isinstance(text, str) else ""


def parsed(model: type[Model], body: bytes) -> Model:
    """`body` read as the protocol's `model`; `BadReply` when it is not."""
    try:
        return model.model_validate_json(body)
    except ValidationError as error:
        raise BadReply(f"the reply does not follow the protocol: {error.error_count()} errors") from None


class Client:
    """A connection to the service for calls that wait their turn (the pending-repair API).

    Each call may take `timeout` seconds unless told otherwise; a repair's `key`, once given, goes with
    every call about it. Transport errors become `Unreachable`, error statuses `ErrorStatus`.
    """

    def __init__(self, base_url: str, timeout: float) -> None:
        self.httpx = httpx = http_library()
        self.http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers(), timeout=timeout)
        self.timeout = timeout

    def __enter__(self) -> Client:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.http.close()

    def call(self, method: str, path: str, body: BaseModel | None = None, key: str | None = None,
             params: dict[str, str] | None = None, timeout: float | None = None) -> bytes:
        """The body of the answer to one call; `body` goes as JSON, `key` in `KEY_HEADER`."""
        sent = {"Content-Type": "application/json"} if body is not None else {}
        if key is not None:
            sent[KEY_HEADER] = key
        content = body.model_dump_json().encode() if body is not None else None
        try:
            reply = self.http.request(method, path, content=content, headers=sent, params=params,
                                      timeout=self.timeout if timeout is None else timeout)
        except self.httpx.HTTPError as error:
            raise unreachable(error) from None
        if reply.status_code >= 400:
            raise ErrorStatus(reply.status_code, error_detail(reply.content))
        return reply.content
