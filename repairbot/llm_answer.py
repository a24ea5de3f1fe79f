"""Where in a completion the model's answer is: its tool calls, its content, or its reasoning.

Structured arguments win over prose: when the model answered through tool calls, every call is read
(parallel calls often carry one suggestion each) and the prose beside them is not the answer. Else
the content is read with its reasoning left out (`llm_parse.split_reasoning`: a `<think>` block, or
all before a lone `</think>`). Only when neither holds an answer is the reasoning read that a
reasoning parser sent apart (`reasoning_content`, `reasoning`) or that the content held, and then
its last complete answer is taken: a model drafts first and concludes last. Whatever is read here
is checked against the crash like any answer (`repairbot.llm_check`).
"""

from __future__ import annotations

from typing import Any

from repairbot.llm_parse import ReplyError, decode, last_answer, read_noted, split_reasoning
from repairbot.llm_wire import Completion, ToolCall


def find_answer(completion: Completion) -> tuple[dict[str, Any], list[str]]:
    """The answer object of a completion, and notes on where it was found; `ReplyError` if none."""
    if completion.tool_calls:
        answer = _from_tools(completion.tool_calls)
        if answer is not None:
            names = ", ".join(dict.fromkeys(f"`{call.name}`" for call in completion.tool_calls))
            count = len(completion.tool_calls)
            where = f"the tool call {names}" if count == 1 else f"the {count} tool calls ({names})"
            prose = "; the prose in `content` beside it was not read as the answer" if completion.content else ""
            return answer, [f"read from {where}{prose}"]
    content = completion.content or ""
    try:
        return read_noted(content)
    except ReplyError as error:
        failure = error
    reasoning = "\n".join(part for part in (completion.reasoning or "", split_reasoning(content)[0]) if part.strip())
    answer = last_answer(reasoning) if reasoning else None
    if answer is not None:
        field = f"`{completion.reasoning_field}`" if completion.reasoning else "its `<think>` block"
        held = "held no answer" if content.strip() else "was empty"
        return answer, [f"read from the model's reasoning ({field}), its last complete answer: the content {held}"]
    if not content.strip() and completion.reasoning:
        raise ReplyError(
            f"the reply's content is empty and its reasoning (`{completion.reasoning_field}`) holds no answer"
        )
    raise failure


def _from_tools(calls: list[ToolCall]) -> dict[str, Any] | None:
    """Every tool call's arguments, merged: the first diagnosis and answer in words, all suggestions.

    A call's arguments are a whole answer, or one suggestion (an object with a `kind`).
    """
    merged: dict[str, Any] = {}
    suggestions: list[Any] = []
    for call in calls:
        try:
            value: dict[str, Any] | None = read_noted(call.arguments)[0]
        except ReplyError:
            value = _one_suggestion(call.arguments)
        if value is None:
            continue
        for key in ("diagnosis", "answer"):
            if key in value and key not in merged:
                merged[key] = value[key]
        items = value.get("suggestions")
        suggestions += items if isinstance(items, list) else [items] if isinstance(items, dict) else []
    if not merged and not suggestions:
        return None
    return merged | {"suggestions": suggestions}


def _one_suggestion(arguments: str) -> dict[str, Any] | None:
    """A tool call whose arguments are one suggestion, as an answer holding it."""
    value = decode(arguments)
    return {"suggestions": [value]} if isinstance(value, dict) and "kind" in value else None
