"""Asking the repair bot about a crash: over HTTP when a URL is configured, else in-process.

A crash must never get worse because the bot is away, slow or hostile: when the server cannot be
reached, answers badly, passes the call's deadline or sends more than `MAX_REPLY_BYTES`, the
answer comes from the embedded rules engine instead, with a warning that names the URL and what
happened. The deadline is one wall-clock bound over the whole call (connecting, sending, waiting,
reading): a bot trickling a byte every few seconds is cut at it, which per-read timeouts never do.
The token, the errors and the route are the service client's (`daifu.decide.transport`).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from daifu.decide import transport
from daifu.decide.transport import BadReply, DeadlineExceeded, ErrorStatus, ReplyTooLarge, ServiceFailed
from daifu.say import say
from repairbot.protocol import (
    SUGGEST_ROUTE,
    CrashReport,
    CrashRequest,
    Diagnosis,
    Exchange,
    SuggestResponse,
    Suggestion,
    Transcript,
)

if TYPE_CHECKING:
    import httpx

DEFAULT_DEADLINE = 45.0
MAX_REPLY_BYTES = 4 * 2**20
"""Bytes of a reply read at most; an answer of 8 suggestions is far smaller."""


@dataclass
class BotAnswer:
    """The bot's diagnosis and suggestions (best first), who answered, and any warning on the way.

    source: the URL asked, or `"in-process"`. backend_used, fallback_reason: as the server said,
    or `"rules"` and the reason the server was not used. answer: the answer in words to the
    question asked, if one was. transcript: the model call behind the answer, if the server made
    one; notes: how the server read the model's reply.
    """

    diagnosis: Diagnosis
    suggestions: list[Suggestion]
    backend_used: str
    source: str
    fallback_reason: str | None = None
    warning: str | None = None
    answer: str | None = None
    transcript: Transcript | None = None
    notes: list[str] = field(default_factory=list)


def ask_bot(
    report: CrashReport,
    url: str | None,
    deadline: float = DEFAULT_DEADLINE,
    max_reply: int = MAX_REPLY_BYTES,
    *,
    question: str | None = None,
    conversation: Sequence[Exchange] = (),
) -> BotAnswer:
    """The repair bot's answer for `report`: from the server at `url`, or in-process if `url` is None.

    deadline: seconds the call to the server may take in all. max_reply: bytes of reply read at most.
    question, conversation: a person's question about the crash and the earlier rounds of the
    conversation (the console's `ask`); the rules engine answers that it takes no questions.
    """
    if url is None:
        return _in_process(report, question)
    try:
        reply = call_bot(report, url, deadline, max_reply, question=question, conversation=conversation)
    except ServiceFailed as error:
        warning = f"The repair bot at {url} failed ({error}); using the embedded rules engine instead."
        say(warning)
        answer = _in_process(report, question)
        answer.fallback_reason, answer.warning = warning, warning
        return answer
    return BotAnswer(
        diagnosis=reply.diagnosis,
        suggestions=reply.suggestions,
        backend_used=reply.backend_used,
        source=url,
        fallback_reason=reply.fallback_reason,
        answer=reply.answer,
        transcript=reply.transcript,
        notes=reply.notes,
    )


def call_bot(
    report: CrashReport,
    url: str,
    deadline: float,
    max_reply: int = MAX_REPLY_BYTES,
    *,
    question: str | None = None,
    conversation: Sequence[Exchange] = (),
) -> SuggestResponse:
    """The server's suggestions for `report`, within `deadline` seconds; raises `transport.ServiceFailed`.

    The call runs on an event loop of its own in a short-lived thread, so that cancelling it at the
    deadline stops it wherever it is (connecting, sending, waiting for headers, reading the body),
    and so that no event loop of the user's program is touched.
    """
    outcome: list[Any] = []

    def run() -> None:
        try:
            body = _body(report, deadline, question, conversation)
            outcome.append(asyncio.run(_call_within(body, url, deadline, max_reply)))
        except BaseException as error:  # handed to the caller's thread, which raises it
            outcome.append(error)

    thread = threading.Thread(target=run, name="daifu-bot-call", daemon=True)
    thread.start()
    thread.join(deadline + 5.0)  # the loop cancels at the deadline; this only guards against a stuck loop
    if not outcome:
        raise DeadlineExceeded(f"no answer within the {deadline:g} s deadline")
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result  # type: ignore[no-any-return]


async def _call_within(request: bytes, url: str, deadline: float, max_reply: int) -> SuggestResponse:
    try:
        body = await asyncio.wait_for(_post(request, url, deadline, max_reply), deadline)
    except asyncio.TimeoutError:
        raise DeadlineExceeded(f"no complete answer within the {deadline:g} s deadline") from None
    return transport.parsed(SuggestResponse, body)


async def _post(request: bytes, url: str, deadline: float, max_reply: int) -> bytes:
    """The reply's body, read as it streams in and refused as soon as it passes `max_reply` bytes.

    Transport errors become `transport.ServiceFailed`s, the cause kept (as httpx's
    `map_httpcore_exceptions` does for httpcore's): callers handle one family of errors, whose
    messages say what happened.
    """
    headers = {**transport.headers(json_body=True), "Accept-Encoding": "identity"}
    httpx = transport.http_library()
    try:
        async with httpx.AsyncClient(timeout=deadline) as client:
            endpoint = f"{url.rstrip('/')}{SUGGEST_ROUTE}"
            async with client.stream("POST", endpoint, content=request, headers=headers) as response:
                return await _read(response, max_reply)
    except httpx.TimeoutException as error:
        raise DeadlineExceeded(f"no complete answer within the {deadline:g} s deadline") from error
    except httpx.HTTPError as error:
        raise transport.unreachable(error) from error


async def _read(response: httpx.Response, max_reply: int) -> bytes:
    if response.status_code >= 400:
        raise ErrorStatus(response.status_code, await _error_detail(response))
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_reply:
        raise ReplyTooLarge(f"the reply declares {int(declared)} bytes; at most {max_reply} are read")
    if response.headers.get("content-encoding", "identity") != "identity":
        raise BadReply(f"the reply is {response.headers['content-encoding']}-encoded, which was not asked for")
    chunks, size = [], 0
    async for chunk in response.aiter_raw():
        size += len(chunk)
        if size > max_reply:
            raise ReplyTooLarge(f"the reply passed {max_reply} bytes; reading stopped there")
        chunks.append(chunk)
    return b"".join(chunks)


async def _error_detail(response: httpx.Response) -> str:
    """What the server said about its error status (`transport.error_detail`), read no further than needed."""
    head = b""
    async for chunk in response.aiter_raw():
        head += chunk
        if len(head) > transport.MAX_DETAIL_BYTES:
            break  # longer than any error of ours: not worth quoting
    return transport.error_detail(head)


def _body(report: CrashReport, deadline: float, question: str | None, conversation: Sequence[Exchange]) -> bytes:
    """The request (`CrashRequest`): the report, the deadline, and a question with its conversation only
    when there is one. Sent as given: the service checks it (a deadline past its bounds is its 422)."""
    request = CrashRequest.model_construct(report=report, deadline_s=deadline, question=question or None,
                                           conversation=list(conversation))
    given = {"question": question, "conversation": conversation}
    left_out = {"backend"} | {name for name, value in given.items() if not value}
    return request.model_dump_json(exclude=left_out).encode()


def _in_process(report: CrashReport, question: str | None = None) -> BotAnswer:
    from repairbot.backends.rules import RulesBackend  # the rules engine is only loaded when a crash needs it

    answer = RulesBackend().suggest(report, question=question)
    return BotAnswer(
        diagnosis=answer.diagnosis,
        suggestions=answer.suggestions,
        backend_used="rules",
        source="in-process",
        answer=answer.answer,
    )
