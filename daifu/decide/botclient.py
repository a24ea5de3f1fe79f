"""Asking the repair bot about a crash: over HTTP when a URL is configured, else in-process.

A crash must never get worse because the bot is away, slow or hostile: when the server cannot be
reached, answers badly, passes the call's deadline or sends more than `MAX_REPLY_BYTES`, the
answer comes from the embedded rules engine instead, with a warning that names the URL and what
happened. The deadline is one wall-clock bound over the whole call (connecting, sending, waiting,
reading): a bot trickling a byte every few seconds is cut at it, which per-read timeouts never do.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import ValidationError

from daifu.say import say
from repairbot.protocol import CrashReport
from repairbot.protocol import Diagnosis, Exchange, SuggestResponse, Suggestion, Transcript

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


class BotCallFailed(Exception):
    """The repair bot's answer could not be used; the message says why, in a few words."""


class Unreachable(BotCallFailed):
    """No HTTP exchange with the server: refused, reset, a name that does not resolve..."""


class DeadlineExceeded(BotCallFailed):
    """The whole call took longer than its deadline."""


class ReplyTooLarge(BotCallFailed):
    """The reply declared, or sent, more bytes than the client reads."""


class ErrorStatus(BotCallFailed):
    """The server answered with an HTTP error status."""


class BadReply(BotCallFailed):
    """The reply is not the protocol's JSON."""


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
    except BotCallFailed as error:
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
    """The server's suggestions for `report`, within `deadline` seconds; raises `BotCallFailed`.

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
    try:
        return SuggestResponse.model_validate_json(body)
    except ValidationError as error:
        raise BadReply(f"the reply does not follow the protocol: {error.error_count()} errors") from error


async def _post(request: bytes, url: str, deadline: float, max_reply: int) -> bytes:
    """The reply's body, read as it streams in and refused as soon as it passes `max_reply` bytes.

    Transport errors become `BotCallFailed`s, the cause kept (as httpx's `map_httpcore_exceptions`
    does for httpcore's): callers handle one family of errors, whose messages say what happened.
    """
    headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
    if token := os.environ.get("DAIFU_REPAIRBOT_TOKEN"):
        headers["Authorization"] = f"Bearer {token}"
    try:
        async with httpx.AsyncClient(timeout=deadline) as client:
            endpoint = f"{url.rstrip('/')}/v1/suggest"
            async with client.stream("POST", endpoint, content=request, headers=headers) as response:
                return await _read(response, max_reply)
    except httpx.TimeoutException as error:
        raise DeadlineExceeded(f"no complete answer within the {deadline:g} s deadline") from error
    except httpx.HTTPError as error:
        raise Unreachable(f"{type(error).__name__}: {error}" if str(error) else type(error).__name__) from error


async def _read(response: httpx.Response, max_reply: int) -> bytes:
    if response.status_code >= 400:
        detail = await _error_detail(response)
        raise ErrorStatus(f"HTTP {response.status_code}" + (f": {detail}" if detail else ""))
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


async def _error_detail(response: httpx.Response, limit: int = 2048) -> str:
    """What the server said about its error status (its `message` or `detail`), from the first `limit` bytes."""
    head = b""
    async for chunk in response.aiter_raw():
        head += chunk
        if len(head) >= limit:
            return ""  # longer than any error of ours: not worth quoting
    try:
        said = json.loads(head)
    except ValueError:
        return ""
    text = said.get("message") or said.get("detail") if isinstance(said, dict) else None
    return text[:300] if isinstance(text, str) else ""


def _body(report: CrashReport, deadline: float, question: str | None, conversation: Sequence[Exchange]) -> bytes:
    """The request: the report, the deadline, and a question with its conversation only when there is one."""
    asked = ""
    if question:
        asked += f', "question": {json.dumps(question)}'
    if conversation:
        asked += ', "conversation": [' + ", ".join(e.model_dump_json() for e in conversation) + "]"
    return ('{"report": ' + report.model_dump_json() + f', "deadline_s": {json.dumps(deadline)}{asked}}}').encode()


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
