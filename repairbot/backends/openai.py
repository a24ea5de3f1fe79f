"""The `openai` backend: any OpenAI-compatible Chat Completions endpoint (OpenAI, Ollama, vLLM, llama.cpp).

Configuration (environment):
- `DAIFU_OPENAI_MODEL`: the model's name at the endpoint. Required: without it the backend is
  unavailable and says so (`/v1/backends`, and `daifu serve --backend openai` refuses to start).
- `DAIFU_OPENAI_BASE_URL`, else `OPENAI_BASE_URL`, else OpenAI's own: the URL ending in `/v1`.
- `DAIFU_OPENAI_API_KEY`, else `OPENAI_API_KEY`: needed for a remote endpoint; a server on this
  machine (loopback URL) is sent a placeholder instead.
- `DAIFU_OPENAI_MAX_TOKENS`: the reply's token limit (default 1200).

One model call per crash, bounded by the crash's `Deadline`: the call is cancelled, closing its
connection, when the deadline passes or the client goes away; one retry at most, and only when
the first attempt failed fast (connection refused, 429, 5xx) with time left. What the endpoint
accepts (a JSON Schema `response_format`, `json_object`, or plain text; `max_tokens` or
`max_completion_tokens`; a `temperature`) is learnt from its 400 answers and remembered per base
URL and model, so only the first crash at a new endpoint may need more than one request.

The answer always holds the rules engine's suggestions as well, ranked with the model's by
confidence, each marked with its origin; when the model gives nothing usable they are all there
is, and `fallback_reason` says why. The API key never appears in any message. Every call made is
returned as a `Transcript` (the messages sent, the raw reply, tokens, how it was read), bounded
by the service before it is sent.

A person's question (the console's `ask`) and the conversation before it go in the same call:
the reply's schema gains one field, `answer`, only when a question is asked.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import os
import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

import openai
from openai.types.chat import ChatCompletion

from repairbot.protocol import CrashReport
from repairbot.backends.base import NO_QUESTIONS, Answer, merge
from repairbot.deadline import Cancelled, Deadline, server_default
from repairbot.llm_check import Reading, read_reply
from repairbot.llm_parse import MODEL_KINDS, ReplyError, read_object
from repairbot.prompts import PromptError, messages
from repairbot.protocol import CATEGORIES
from repairbot.protocol import BackendInfo, ChatMessage, Diagnosis, Exchange, Suggestion, Transcript, Usage
from repairbot.rules import analyse

DEFAULT_MAX_TOKENS = 1200
PLACEHOLDER_KEY = "daifu-local-no-key"
"""Sent to a loopback endpoint when no key is set: the SDK needs one, local servers ignore it."""
_FORMATS = ("json_schema", "json_object", "text")
_POLL = 0.05
_MIN_RETRY_SECONDS = 3.0
"""A retry is only worth it with at least this much of the deadline left."""


class LLMFailure(RuntimeError):
    """The model could not be reached, or answered nothing usable; the message says which, in its words."""


@dataclass(frozen=True)
class Capabilities:
    """What an endpoint accepts, as learnt from its answers."""

    response_format: str = "json_schema"
    tokens_parameter: str = "max_tokens"
    temperature: bool = True


_learnt: dict[tuple[str, str], Capabilities] = {}
_learnt_lock = threading.Lock()


def forget_capabilities() -> None:
    """Forget what endpoints accept (for tests, and after an endpoint was upgraded)."""
    with _learnt_lock:
        _learnt.clear()


@dataclass
class _Call:
    """What one crash's model call sent and got back, for its `Transcript`."""

    model: str
    messages: list[dict[str, str]] = field(default_factory=list)
    reply: str | None = None
    usage: Usage | None = None
    finish_reason: str | None = None

    def completed(self, completion: ChatCompletion) -> None:
        """Keep the reply's raw text, its token counts and why it ended."""
        self.reply = _raw_reply(completion)
        usage = completion.usage
        if usage is not None and usage.total_tokens:
            self.usage = Usage(prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens)
        self.finish_reason = completion.choices[0].finish_reason if completion.choices else None

    def transcript(self, notes: list[str]) -> Transcript | None:
        """The call as made; `None` when nothing was sent (the backend could not work as configured)."""
        if not self.messages:
            return None
        return Transcript(
            model=self.model,
            messages=[ChatMessage(role=m["role"], content=m["content"]) for m in self.messages],
            reply=self.reply,
            usage=self.usage,
            finish_reason=self.finish_reason,
            notes=notes,
        )


def reply_schema(answer: bool = False) -> dict[str, Any]:
    """The strict JSON Schema of the reply (OpenAI structured outputs: every field required, nullable).

    answer: add the `answer` field, the answer in words to a person's question.
    """

    def nullable(kind: str) -> dict[str, Any]:
        return {"type": [kind, "null"]}

    suggestion = {
        "type": "object",
        "additionalProperties": False,
        "required": ["kind", "function", "start_line", "end_line", "new_code", "code", "explanation", "confidence"],
        "properties": {
            "kind": {"type": "string", "enum": list(MODEL_KINDS)},
            "function": nullable("string"),
            "start_line": nullable("integer"),
            "end_line": nullable("integer"),
            "new_code": nullable("string"),
            "code": nullable("string"),
            "explanation": {"type": "string"},
            "confidence": {"type": "number"},
        },
    }
    diagnosis = {
        "type": "object",
        "additionalProperties": False,
        "required": ["category", "culprit_function", "culprit_line", "explanation"],
        "properties": {
            "category": {"type": "string", "enum": list(CATEGORIES)},
            "culprit_function": {"type": "string"},
            "culprit_line": {"type": "integer"},
            "explanation": {"type": "string"},
        },
    }
    schema: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["diagnosis", "suggestions"],
        "properties": {"diagnosis": diagnosis, "suggestions": {"type": "array", "items": suggestion}},
    }
    if answer:
        schema["required"].append("answer")
        schema["properties"]["answer"] = {"type": "string"}
    return schema


class OpenAIBackend:
    """Asks an OpenAI-compatible model for a diagnosis and ranked repairs of a crash, in one call.

    api_key, base_url, model, max_tokens: override the environment (see the module docstring).
    deadline: seconds allowed per crash when the caller gives no `Deadline` (`$DAIFU_BOT_DEADLINE`
        or 45 by default).
    """

    name = "openai"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        model: str | None = None,
        max_tokens: int | None = None,
        deadline: float | None = None,
    ) -> None:
        env = os.environ.get
        self.base_url = (
            base_url or env("DAIFU_OPENAI_BASE_URL") or env("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        ).rstrip("/")
        self.model = model or env("DAIFU_OPENAI_MODEL") or None
        self._key = api_key or env("DAIFU_OPENAI_API_KEY") or env("OPENAI_API_KEY") or None
        self.max_tokens = max_tokens or int(env("DAIFU_OPENAI_MAX_TOKENS") or DEFAULT_MAX_TOKENS)
        self.deadline = deadline if deadline is not None else server_default()

    @property
    def local(self) -> bool:
        """Whether the endpoint is on this machine (a loopback address), where no key is needed."""
        host = urlsplit(self.base_url).hostname or ""
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    def problem(self) -> str | None:
        """Why the backend cannot work as configured, or `None`."""
        if not self.model:
            return (
                f"DAIFU_OPENAI_MODEL is not set: set it to the name of the model served at {self.base_url} "
                "(e.g. `llama3.1:8b` for Ollama, the `--model` of vLLM, `gpt-4o-mini` for OpenAI)"
            )
        if not self._key and not self.local:
            return (
                f"OPENAI_API_KEY (or DAIFU_OPENAI_API_KEY) is not set, and {self.base_url} is not on this machine; "
                "a server on 127.0.0.1 or localhost needs no key"
            )
        return None

    def info(self) -> BackendInfo:
        problem = self.problem()
        if problem:
            return BackendInfo(name=self.name, available=False, detail=problem)
        return BackendInfo(name=self.name, available=True, detail=f"model {self.model} at {self.base_url}")

    def diagnose(
        self,
        report: CrashReport,
        deadline: Deadline | None = None,
        *,
        question: str | None = None,
        conversation: Sequence[Exchange] = (),
    ) -> Answer:
        answer = self.suggest(report, deadline, question=question, conversation=conversation)
        return replace(answer, suggestions=[])

    def suggest(
        self,
        report: CrashReport,
        deadline: Deadline | None = None,
        *,
        question: str | None = None,
        conversation: Sequence[Exchange] = (),
    ) -> Answer:
        """The model's diagnosis and repairs with the rules engine's; the rules engine's alone if the model fails.

        question, conversation: a person's question, answered in `Answer.answer`, and the earlier
        rounds, sent in the same call. Raises `Cancelled` when the deadline was cancelled (the
        client went away).
        """
        deadline = deadline or Deadline(self.deadline)
        rules_diagnosis, rules_suggestions = analyse(report)
        call = _Call(self.model or "")
        try:
            text, notes = self._ask(report, rules_diagnosis, deadline, call, question, conversation)
            reading = read_reply(report, text)
        except (LLMFailure, PromptError, ReplyError) as failure:
            reason = self._redact(f"{self.name} backend ({self._where()}): {failure}")
            return Answer(
                rules_diagnosis,
                rules_suggestions,
                "rules",
                f"{reason}; the rules engine answered instead",
                answer=NO_QUESTIONS if question else None,
                transcript=call.transcript([reason]),
            )
        answer = self._combine(reading, notes, rules_diagnosis, rules_suggestions, question)
        answer.transcript = call.transcript(answer.notes)
        return answer

    def _combine(
        self,
        reading: Reading,
        notes: list[str],
        rules_diagnosis: Diagnosis,
        rules: list[Suggestion],
        question: str | None = None,
    ) -> Answer:
        notes = [self._redact(n) for n in notes + reading.notes]
        if question and not reading.answer:
            notes.append("the reply holds no `answer` to the person's question; its diagnosis stands for one")
        used = self.name if reading.diagnosis or reading.suggestions else "rules"
        fallback = None
        if not reading.suggestions:
            why = f"all {reading.dropped} of its suggestions were dropped" if reading.dropped else "it proposed none"
            fallback = f"{self.name} backend ({self._where()}): no usable repair from the model ({why})"
            fallback += "; the rules engine's suggestions are given" if rules else "; the rules engine has none either"
        return Answer(
            reading.diagnosis or rules_diagnosis,
            merge(reading.suggestions, rules),
            used,
            fallback,
            notes,
            answer=self._redact(reading.answer) if question and reading.answer else None,
        )

    def _where(self) -> str:
        return f"model {self.model} at {self.base_url}"

    def _redact(self, text: str) -> str:
        return text.replace(self._key, "<redacted>") if self._key else text

    def _ask(
        self,
        report: CrashReport,
        hint: Diagnosis,
        deadline: Deadline,
        call: _Call,
        question: str | None,
        conversation: Sequence[Exchange],
    ) -> tuple[str, list[str]]:
        """The text of the model's reply (content or tool-call arguments), and notes on how it came.

        `call` keeps what was sent and what came back, whatever happens.
        """
        problem = self.problem()
        if problem:
            raise LLMFailure(problem)
        chat = messages(report, hint, question, conversation)
        call.messages = chat
        started = time.monotonic()
        completion, notes = asyncio.run(self._complete(chat, deadline, answer=bool(question)))
        call.completed(completion)
        if call.reply is not None:
            call.reply = self._redact(call.reply)
        usage = completion.usage
        tokens = (
            f" ({usage.prompt_tokens} tokens in, {usage.completion_tokens} out)" if usage and usage.total_tokens else ""
        )
        notes.insert(0, f"the model answered in {time.monotonic() - started:.1f} s{tokens}")
        return _reply_text(completion, self.max_tokens), notes

    async def _complete(
        self, chat: list[dict[str, str]], deadline: Deadline, answer: bool = False
    ) -> tuple[ChatCompletion, list[str]]:
        """One completion: adapting to what the endpoint rejects (remembered), retrying once if time allows.

        answer: the reply's schema asks for an answer to a person's question too.
        """
        key = (self.base_url, self.model or "")
        with _learnt_lock:
            capabilities = _learnt.get(key, Capabilities())
        notes: list[str] = []
        retried = False
        for _ in range(len(_FORMATS) + 3):  # each 400 teaches one thing; at most this many
            try:
                return await self._attempt(self._parameters(chat, capabilities, answer), deadline), notes
            except openai.APIStatusError as error:
                if error.status_code in (400, 422):
                    learnt = _adapt(capabilities, error)
                    if learnt is None:
                        raise LLMFailure(self._status(error)) from None
                    notes.append(f"the endpoint rejected {_difference(capabilities, learnt)}: {_said(error)}")
                    capabilities = learnt
                    with _learnt_lock:
                        _learnt[key] = learnt
                    continue
                if retried or not self._may_retry(error, deadline):
                    raise LLMFailure(self._status(error)) from None
            except openai.APITimeoutError:
                raise LLMFailure(self._late(deadline)) from None  # its timeout is what was left of the deadline
            except openai.APIConnectionError as error:
                if retried or deadline.remaining() < _MIN_RETRY_SECONDS or deadline.cancelled:
                    raise LLMFailure(f"cannot reach {self.base_url}: {_describe(error)}") from None
            retried = True
            notes.append("retried once after a failed attempt")
            await asyncio.sleep(min(1.0, deadline.remaining() / 10))
        raise LLMFailure("the endpoint kept rejecting the request's parameters")

    def _parameters(
        self, chat: list[dict[str, str]], capabilities: Capabilities, answer: bool = False
    ) -> dict[str, Any]:
        parameters: dict[str, Any] = {"model": self.model, "messages": chat}
        parameters[capabilities.tokens_parameter] = self.max_tokens
        if capabilities.temperature:
            parameters["temperature"] = 0
        if capabilities.response_format == "json_schema":
            schema = {"name": "daifu_repair", "strict": True, "schema": reply_schema(answer)}
            parameters["response_format"] = {"type": "json_schema", "json_schema": schema}
        elif capabilities.response_format == "json_object":
            parameters["response_format"] = {"type": "json_object"}
        return parameters

    async def _attempt(self, parameters: dict[str, Any], deadline: Deadline) -> ChatCompletion:
        """One request, abandoned (its connection closed) when the deadline passes or is cancelled."""
        margin = min(1.0, deadline.seconds / 10)  # time left to send the answer back
        budget = deadline.remaining() - margin
        if budget <= 0 or deadline.cancelled:
            raise Cancelled() if deadline.cancelled else LLMFailure(self._late(deadline))
        client = openai.AsyncOpenAI(
            api_key=self._key or PLACEHOLDER_KEY,
            base_url=self.base_url,
            max_retries=0,
            timeout=budget,
            http_client=openai.DefaultAsyncHttpxClient(verify=_tls()),
        )
        async with client:
            call = asyncio.ensure_future(client.chat.completions.create(**parameters))
            try:
                while True:
                    done, _ = await asyncio.wait({call}, timeout=_POLL)
                    if done:
                        return call.result()
                    if deadline.cancelled:
                        raise Cancelled()
                    if deadline.remaining() <= margin:
                        raise LLMFailure(self._late(deadline))
            finally:
                call.cancel()

    def _late(self, deadline: Deadline) -> str:
        return f"no reply within the crash's deadline of {deadline.seconds:g} s (DAIFU_BOT_DEADLINE)"

    def _may_retry(self, error: openai.APIStatusError, deadline: Deadline) -> bool:
        if error.status_code not in (408, 409, 429) and error.status_code < 500:
            return False
        wait = _retry_after(error)
        return not deadline.cancelled and deadline.remaining() - wait >= _MIN_RETRY_SECONDS

    def _status(self, error: openai.APIStatusError) -> str:
        said = _said(error)
        if error.status_code == 404 and self.model and self.model in said:
            return f"HTTP 404: {said} (check DAIFU_OPENAI_MODEL)"
        if error.status_code == 404 and not urlsplit(self.base_url).path.rstrip("/").endswith("/v1"):
            return (
                f"HTTP 404 for {self.base_url}/chat/completions ({said}): OpenAI-compatible servers answer under "
                f"/v1; set DAIFU_OPENAI_BASE_URL to {self.base_url}/v1"
            )
        if error.status_code == 401:
            return f"HTTP 401: {said} (check OPENAI_API_KEY)"
        return f"HTTP {error.status_code}: {said}"


@functools.cache
def _tls() -> ssl.SSLContext:
    """The TLS context of every call, made once: loading the system's certificates takes 0.1 s."""
    return ssl.create_default_context()


def _reply_text(completion: ChatCompletion, max_tokens: int) -> str:
    """The reply's text; `LLMFailure` for a refusal, a filtered or empty reply, or one cut at the limit."""
    if not completion.choices:
        raise LLMFailure("the endpoint's reply has no choices")
    choice = completion.choices[0]
    message = choice.message
    if getattr(message, "refusal", None):
        raise LLMFailure(f"the model refused: {str(message.refusal)[:300]!r}")
    text = message.content or ""
    if not text.strip() and message.tool_calls:
        text = getattr(getattr(message.tool_calls[0], "function", None), "arguments", "") or ""
    if not text.strip() and message.function_call:
        text = message.function_call.arguments or ""
    if choice.finish_reason == "content_filter":
        raise LLMFailure("the endpoint's content filter stopped the reply")
    if choice.finish_reason == "length" and not _holds_answer(text):
        raise LLMFailure(
            f"the reply was cut off at the {max_tokens}-token limit (finish_reason=length) before its JSON "
            "was complete; raise DAIFU_OPENAI_MAX_TOKENS if the model thinks at length"
        )
    if not text.strip():
        raise LLMFailure("the model's reply was empty")
    return text


def _raw_reply(completion: ChatCompletion) -> str | None:
    """The reply's text as it came: its content, else a tool call's arguments, else its refusal."""
    if not completion.choices:
        return None
    message = completion.choices[0].message
    if message.content:
        return message.content
    if message.tool_calls:
        return getattr(getattr(message.tool_calls[0], "function", None), "arguments", None)
    if message.function_call:
        return message.function_call.arguments
    refusal = getattr(message, "refusal", None)
    return f"(refusal) {refusal}" if refusal else message.content


def _holds_answer(text: str) -> bool:
    """Whether a reply cut at the token limit still holds a whole answer object (the cut was after it)."""
    try:
        return bool(read_object(text))
    except ReplyError:
        return False


def _adapt(capabilities: Capabilities, error: openai.APIStatusError) -> Capabilities | None:
    """What to send instead after a 400 naming a parameter we chose; `None` if the 400 is about something else."""
    body = error.body if isinstance(error.body, dict) else {}
    said = f"{body.get('param') or ''} {_said(error)}".lower()
    if capabilities.response_format != "text" and any(
        word in said for word in ("response_format", "json_schema", "json_object", "structured output", "schema")
    ):
        following = _FORMATS[_FORMATS.index(capabilities.response_format) + 1]
        return replace(capabilities, response_format=following)
    if capabilities.tokens_parameter == "max_tokens" and "max_tokens" in said:
        return replace(capabilities, tokens_parameter="max_completion_tokens")
    if capabilities.temperature and "temperature" in said:
        return replace(capabilities, temperature=False)
    return None


def _difference(old: Capabilities, new: Capabilities) -> str:
    if old.response_format != new.response_format:
        fallback = "plain text" if new.response_format == "text" else f"`{new.response_format}`"
        return f"response_format `{old.response_format}` (now asking for {fallback})"
    if old.tokens_parameter != new.tokens_parameter:
        return "`max_tokens` (now sending `max_completion_tokens`)"
    return "`temperature` (now sending none)"


def _said(error: openai.APIStatusError) -> str:
    """The endpoint's own error message, from whichever shape its error body has."""
    body = error.body
    if isinstance(body, dict):
        for key in ("message", "detail", "error"):
            value = body.get(key)
            if isinstance(value, str) and value:
                return value[:500]
            if isinstance(value, dict) and isinstance(value.get("message"), str):
                return str(value["message"])[:500]
    if isinstance(body, str) and body.strip():
        return body.strip()[:500]
    try:
        text = error.response.text.strip()
    except Exception:  # a streamed body already closed
        text = ""
    return text[:500] or "no message"


def _retry_after(error: openai.APIStatusError) -> float:
    try:
        return min(30.0, float(error.response.headers.get("retry-after", "0")))
    except ValueError:
        return 0.0


def _describe(error: Exception) -> str:
    cause = error.__cause__
    detail = f"{type(cause).__name__}: {cause}" if cause and str(cause) else str(error)
    return detail[:300]
