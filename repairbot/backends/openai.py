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
the first attempt failed fast (connection refused, 429, 5xx) with time left, after the delay the
endpoint's `Retry-After` asks for when it fits in the deadline. What the endpoint accepts (a JSON
Schema `response_format`, `json_object`, or plain text; `max_tokens` or `max_completion_tokens`;
a `temperature`) is learnt from its 400 answers and remembered per base URL and model, so only
the first crash at a new endpoint may need more than one request; a 400 to a structured-output
request that names no parameter is answered by asking once more without `response_format`.

The body is read from its bytes (`repairbot.llm_wire`): server-sent events sent although no
stream was asked for are assembled, and a body that is no chat completion is a failure naming
what it is. The answer is looked for in the tool calls, the content and the reasoning, in that
order (`repairbot.llm_answer`). Text the model wrote that reaches a person (its diagnosis, its
answer in words) is given as the model's, and says that nothing in it was run when it holds
anything shaped like a command (`repairbot.model_words`).

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
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import openai

from repairbot.protocol import CrashReport
from repairbot.backends.base import NO_QUESTIONS, Answer, merge
from repairbot.deadline import Cancelled, Deadline, server_default
from repairbot.llm_answer import find_answer
from repairbot.llm_check import Reading, read_reply
from repairbot.llm_parse import MODEL_KINDS, ReplyError
from repairbot.llm_wire import Completion, WireError, read_body
from repairbot.model_words import as_the_models
from repairbot.prompts import PromptError, messages
from repairbot.reach import unreachable
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

    def completed(self, completion: Completion) -> None:
        """Keep the reply's raw text, its token counts and why it ended."""
        self.reply = completion.raw
        if completion.usage is not None:
            self.usage = Usage(prompt_tokens=completion.usage[0], completion_tokens=completion.usage[1])
        self.finish_reason = completion.finish_reason

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
        """Whether the backend can work now: configured (`problem`), and its endpoint reachable (a probe
        of a second at most, reused for a few seconds: `repairbot.reach`)."""
        problem = self.problem()
        if problem:
            return BackendInfo(name=self.name, available=False, detail=problem)
        where = f"model {self.model} at {self.base_url}"
        down = unreachable(self.base_url)
        if down:
            return BackendInfo(name=self.name, available=False, reachable=False, detail=f"{where}: unreachable: {down}")
        return BackendInfo(name=self.name, available=True, reachable=True, detail=where)

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
            found, notes = self._ask(report, rules_diagnosis, deadline, call, question, conversation)
            reading = read_reply(report, found)
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
        said = self.model or "the model"
        diagnosis = rules_diagnosis
        if reading.diagnosis is not None:
            explanation = as_the_models(said, self._redact(reading.diagnosis.explanation))
            culprit = reading.diagnosis.culprit.model_copy(
                update={"reason": as_the_models(said, self._redact(reading.diagnosis.culprit.reason))}
            )
            diagnosis = reading.diagnosis.model_copy(update={"explanation": explanation, "culprit": culprit})
        return Answer(
            diagnosis,
            merge(reading.suggestions, rules),
            used,
            fallback,
            notes,
            answer=as_the_models(said, self._redact(reading.answer)) if question and reading.answer else None,
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
    ) -> tuple[dict[str, Any], list[str]]:
        """The answer object in the model's reply (`llm_answer.find_answer`), and notes on how it came.

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
        tokens = f" ({usage[0]} tokens in, {usage[1]} out)" if usage else ""
        notes.insert(0, f"the model answered in {time.monotonic() - started:.1f} s{tokens}")
        if completion.streamed:
            notes.append(
                "the endpoint streamed its answer (server-sent events) although no stream was asked for; "
                "it was read whole"
            )
        found, more = _answer(completion, self.max_tokens)
        return found, notes + more

    async def _complete(
        self, chat: list[dict[str, str]], deadline: Deadline, answer: bool = False
    ) -> tuple[Completion, list[str]]:
        """One completion: adapting to what the endpoint rejects (remembered), retrying once if time allows.

        answer: the reply's schema asks for an answer to a person's question too.
        """
        key = (self.base_url, self.model or "")
        with _learnt_lock:
            capabilities = _learnt.get(key, Capabilities())
        notes: list[str] = []
        retried = False
        guessed: Capabilities | None = None  # asked without `response_format` after a 400 that named nothing
        for _ in range(len(_FORMATS) + 3):  # each 400 teaches one thing; at most this many
            try:
                completion = await self._attempt(self._parameters(chat, capabilities, answer), deadline)
            except openai.APIStatusError as error:
                learnt = _adapt(capabilities, error) if error.status_code in (400, 422, 500) else None
                if learnt is not None:
                    notes.append(f"the endpoint rejected {_difference(capabilities, learnt)}: {_said(error)}")
                    capabilities = learnt
                    with _learnt_lock:
                        _learnt[key] = learnt
                    continue
                if error.status_code in (400, 422):
                    if guessed is not None or capabilities.response_format == "text":
                        raise LLMFailure(self._status(error)) from None
                    guessed = capabilities = replace(capabilities, response_format="text")
                    notes.append(
                        f"the endpoint answered HTTP {error.status_code} ({_said(error)[:200]}) to a request with a "
                        "structured-output `response_format`; asked once more without it, for plain text (the "
                        "prompt asks for JSON)"
                    )
                    continue
                wait = _retry_after(error)
                if retried or not self._may_retry(error, deadline, wait):
                    raise LLMFailure(self._status(error, wait, deadline)) from None
                retried = True
                notes.append(
                    f"retried once after HTTP {error.status_code}, "
                    + (f"{wait:g} s later as its Retry-After asked" if wait else "a moment later")
                )
                await self._pause(wait or min(1.0, deadline.remaining() / 10), deadline)
                continue
            except openai.APITimeoutError:
                raise LLMFailure(self._late(deadline)) from None  # its timeout is what was left of the deadline
            except openai.APIConnectionError as error:
                if retried or deadline.remaining() < _MIN_RETRY_SECONDS or deadline.cancelled:
                    raise LLMFailure(f"cannot reach {self.base_url}: {_describe(error)}") from None
                retried = True
                notes.append("retried once after a failed attempt")
                await self._pause(min(1.0, deadline.remaining() / 10), deadline)
                continue
            if guessed is not None:
                with _learnt_lock:
                    _learnt[key] = guessed
                notes.append(f"{self.base_url} (model {self.model}) is asked without `response_format` from now on")
            return completion, notes
        raise LLMFailure("the endpoint kept rejecting the request's parameters")

    async def _pause(self, seconds: float, deadline: Deadline) -> None:
        """Wait `seconds` before a retry, or less if the client goes away."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if deadline.cancelled:
                raise Cancelled()
            await asyncio.sleep(min(_POLL, end - time.monotonic()))

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

    async def _attempt(self, parameters: dict[str, Any], deadline: Deadline) -> Completion:
        """One request, abandoned (its connection closed) when the deadline passes or is cancelled.

        Its body is read as `repairbot.llm_wire` reads it, whatever its content type says.
        """
        # time left to fall back and send the answer back: a busy machine schedules the thread late
        margin = min(1.0, max(0.5, deadline.seconds / 10), deadline.seconds / 3)
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
            call = asyncio.ensure_future(client.chat.completions.with_raw_response.create(**parameters))
            try:
                while True:
                    done, _ = await asyncio.wait({call}, timeout=_POLL)
                    if done:
                        response = call.result().http_response
                        try:
                            return read_body(response.content, response.headers.get("content-type", ""))
                        except WireError as error:
                            raise LLMFailure(f"the endpoint's answer (HTTP {response.status_code}) {error}") from None
                    if deadline.cancelled:
                        raise Cancelled()
                    if deadline.remaining() <= margin:
                        raise LLMFailure(self._late(deadline))
            finally:
                call.cancel()

    def _late(self, deadline: Deadline) -> str:
        return f"no reply within the crash's deadline of {deadline.seconds:g} s (DAIFU_BOT_DEADLINE)"

    def _may_retry(self, error: openai.APIStatusError, deadline: Deadline, wait: float) -> bool:
        if error.status_code not in (408, 409, 429) and error.status_code < 500:
            return False
        return not deadline.cancelled and deadline.remaining() - wait >= _MIN_RETRY_SECONDS

    def _status(self, error: openai.APIStatusError, wait: float = 0.0, deadline: Deadline | None = None) -> str:
        said = _said(error)
        if wait and deadline is not None and deadline.remaining() - wait < _MIN_RETRY_SECONDS:
            return (
                f"HTTP {error.status_code}: {said}; its Retry-After asks for {wait:g} s, more than the "
                f"{max(0.0, deadline.remaining()):.0f} s left of the crash's deadline of {deadline.seconds:g} s "
                "(DAIFU_BOT_DEADLINE)"
            )
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


def _answer(completion: Completion, max_tokens: int) -> tuple[dict[str, Any], list[str]]:
    """The answer object in the reply and where it was found; `LLMFailure` for a refusal, a filtered
    or empty reply, or one cut at the limit before any answer was whole."""
    if completion.refusal:
        raise LLMFailure(f"the model refused: {completion.refusal[:300]!r}")
    if completion.finish_reason == "content_filter":
        raise LLMFailure("the endpoint's content filter stopped the reply")
    if not (completion.content or "").strip() and not completion.tool_calls and not completion.reasoning:
        raise LLMFailure("the model's reply was empty")
    try:
        return find_answer(completion)
    except ReplyError:
        if completion.finish_reason == "length":
            raise LLMFailure(
                f"the reply was cut off at the {max_tokens}-token limit (finish_reason=length) before its JSON "
                "was complete; raise DAIFU_OPENAI_MAX_TOKENS if the model thinks at length"
            ) from None
        raise


def _adapt(capabilities: Capabilities, error: openai.APIStatusError) -> Capabilities | None:
    """What to send instead after a 400 (or a 500, as some llama.cpp forks answer) naming a parameter we
    chose; `None` if the answer is about something else."""
    body = error.body if isinstance(error.body, dict) else {}
    said = f"{body.get('param') or ''} {_said(error)}".lower()
    if error.status_code == 500 and "response_format" not in said:
        return None
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
    """The seconds the endpoint asks to wait (`retry-after-ms`, or `Retry-After` in seconds or as an
    HTTP date); 0 when it asks nothing. The crash's deadline decides whether the wait is made."""
    headers = error.response.headers
    try:
        if headers.get("retry-after-ms"):
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        value = headers.get("retry-after", "").strip()
        if not value:
            return 0.0
        try:
            seconds = float(value)
        except ValueError:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        return max(0.0, seconds)
    except (ValueError, TypeError, OverflowError):
        return 0.0


def _describe(error: Exception) -> str:
    cause = error.__cause__
    detail = f"{type(cause).__name__}: {cause}" if cause and str(cause) else str(error)
    return detail[:300]
