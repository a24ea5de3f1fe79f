"""What an OpenAI-compatible endpoint sent back, made one chat completion, or a failure that says what it was.

Servers that speak "the OpenAI wire format" differ in what they put where: a reasoning parser
(vLLM, llama.cpp's server, DeepSeek's API) sends the model's reasoning apart from its content, in
`reasoning_content` or (vLLM from 0.11, OpenRouter) `reasoning`; a gateway in front of a model
that answers through tools sends the answer as `tool_calls` beside a preamble in `content`; and
some gateways and small servers answer with server-sent events (`chat.completion.chunk` deltas)
although no stream was asked for. The body is read here from its bytes, not through the SDK's
model of it, so each of these is read, and any body that is no chat completion at all (a proxy's
HTML page, an error object sent with status 200, another API's JSON) is a `WireError` naming what
it is, which the user can act on.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

REASONING_FIELDS = ("reasoning_content", "reasoning")
"""Where reasoning parsers put the model's reasoning, oldest name first."""


class WireError(ValueError):
    """The endpoint's body is not a chat completion; the message says what it is instead."""


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str


@dataclass
class Completion:
    """The first choice of a chat completion, with every part a server may have put its answer in.

    streamed: the body came as server-sent events, assembled here.
    """

    content: str | None = None
    reasoning: str | None = None
    reasoning_field: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    refusal: str | None = None
    finish_reason: str | None = None
    usage: tuple[int | None, int | None] | None = None
    streamed: bool = False

    @property
    def raw(self) -> str | None:
        """The reply as it came, for the transcript: the content alone when it is all there is, else
        each part labelled (reasoning, content, each tool call), or the refusal."""
        parts = []
        if self.reasoning:
            parts.append(f"({self.reasoning_field}) {self.reasoning}")
        if self.content:
            parts.append(self.content if not parts and not self.tool_calls else f"(content) {self.content}")
        parts += [f"(tool call {call.name}) {call.arguments}" for call in self.tool_calls]
        if len(parts) == 1 and len(self.tool_calls) == 1 and not self.content and not self.reasoning:
            return self.tool_calls[0].arguments
        if parts:
            return "\n\n".join(parts)
        return f"(refusal) {self.refusal}" if self.refusal else self.content


def read_body(body: bytes, content_type: str) -> Completion:
    """The completion in a response body; `WireError` when the body holds none."""
    text = body.decode("utf-8", errors="replace")
    if "text/event-stream" in content_type or text.lstrip().startswith("data:"):
        return _from_events(text)
    try:
        data = json.loads(text)
    except ValueError:
        raise WireError(f"is not a chat completion: {_what(text, content_type)}") from None
    return from_object(data)


def from_object(data: Any) -> Completion:
    """The completion in a decoded `chat.completion` object; `WireError` for any other JSON."""
    if not isinstance(data, dict):
        raise WireError(f"is not a chat completion: a JSON {type(data).__name__}")
    if "choices" not in data:
        raise WireError(f"is not a chat completion: {_json_what(data)}")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise WireError("is a chat completion with no choices")
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message")
    if not isinstance(message, dict):
        raise WireError("is a chat completion whose first choice has no message")
    completion = Completion(
        content=_text(message.get("content")),
        refusal=_text(message.get("refusal")),
        finish_reason=_text(choice.get("finish_reason")),
        usage=_usage(data.get("usage")),
    )
    for name in REASONING_FIELDS:
        reasoning = _text(message.get(name))
        if reasoning:
            completion.reasoning, completion.reasoning_field = reasoning, name
            break
    completion.tool_calls = [_tool_call(call) for call in message.get("tool_calls") or [] if isinstance(call, dict)]
    legacy = message.get("function_call")
    if isinstance(legacy, dict):
        completion.tool_calls.append(_tool_call({"function": legacy}))
    return completion


def _from_events(text: str) -> Completion:
    """A completion assembled from server-sent events: each `data:` line a chunk (or, from some
    gateways, the whole completion), until `[DONE]`."""
    completion = Completion(streamed=True)
    content: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    seen = False
    for line in text.splitlines():
        if not line.startswith("data:"):
            continue
        payload = line[len("data:") :].strip()
        if payload == "[DONE]":
            break
        try:
            data = json.loads(payload)
        except ValueError:
            raise WireError(
                f"is a stream of server-sent events holding a line that is not JSON: {payload[:80]!r}"
            ) from None
        if not isinstance(data, dict):
            continue
        if isinstance(data.get("error"), dict):
            raise WireError(f"is a stream of server-sent events that ends in {_json_what(data)}")
        if data.get("usage"):
            completion.usage = _usage(data["usage"])
        for choice in data.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            seen = True
            if isinstance(choice.get("message"), dict):  # the whole completion, framed as an event
                whole = from_object(data)
                whole.streamed = True
                return whole
            delta = choice.get("delta") or {}
            content.append(_text(delta.get("content")) or "")
            for name in REASONING_FIELDS:
                if _text(delta.get(name)):
                    reasoning.append(delta[name])
                    completion.reasoning_field = name
            for call in delta.get("tool_calls") or []:
                entry = calls.setdefault(int(call.get("index", 0)), {"name": "", "arguments": ""})
                function = call.get("function") or {}
                entry["name"] += function.get("name") or ""
                entry["arguments"] += function.get("arguments") or ""
            completion.refusal = _text(delta.get("refusal")) or completion.refusal
            completion.finish_reason = _text(choice.get("finish_reason")) or completion.finish_reason
    if not seen:
        raise WireError("is a stream of server-sent events with no chat completion chunk in it")
    completion.content = "".join(content) or None
    completion.reasoning = "".join(reasoning) or None
    completion.tool_calls = [ToolCall(c["name"], c["arguments"]) for _, c in sorted(calls.items())]
    return completion


def _tool_call(call: dict[str, Any]) -> ToolCall:
    given = call.get("function")
    function: dict[str, Any] = given if isinstance(given, dict) else {}
    arguments = function.get("arguments")
    if isinstance(arguments, (dict, list)):  # some servers send the arguments decoded
        arguments = json.dumps(arguments)
    return ToolCall(str(function.get("name") or "?"), arguments if isinstance(arguments, str) else "")


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _usage(value: Any) -> tuple[int | None, int | None] | None:
    if not isinstance(value, dict) or not value.get("total_tokens"):
        return None
    prompt, completion = value.get("prompt_tokens"), value.get("completion_tokens")
    return (prompt if isinstance(prompt, int) else None, completion if isinstance(completion, int) else None)


def _what(text: str, content_type: str) -> str:
    """What a body that is not JSON is, in a few words."""
    if re.match(r"\s*(<!doctype html|<html)", text, re.IGNORECASE):
        title = re.search(r"<title>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
        named = f" titled {title.group(1).strip()[:80]!r}" if title else ""
        return f"an HTML page{named} (is DAIFU_OPENAI_BASE_URL the API's address, ending in /v1?)"
    if not text.strip():
        return "an empty body"
    kind = content_type.split(";")[0].strip() or "no content type"
    return f"{kind} beginning {text.strip()[:60]!r}"


def _json_what(data: dict[str, Any]) -> str:
    """What a JSON object that is not a completion is: an error (with its message) or its keys."""
    error = data.get("error")
    if isinstance(error, dict):
        return f"an error object ({str(error.get('message') or error)[:300]})"
    if isinstance(error, str):
        return f"an error object ({error[:300]})"
    if isinstance(data.get("message"), dict) and "done" in data:
        return "Ollama's own /api/chat answer (set DAIFU_OPENAI_BASE_URL to the server's /v1 address)"
    return f"a JSON object with the keys {', '.join(sorted(data)[:8])}"
