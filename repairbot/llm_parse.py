"""Reading a language model's reply: tolerant of how models write, strict about what they say.

Models asked for "one JSON object" wrap it in ```json fences, put prose or a `<think>` block
before it, write Python dicts with single quotes, answer through a tool call, give confidence as
90 or "high", and label a kind in their own words. This module finds the object in the text and
reads each suggestion on its own into a `Proposal`, so one malformed item is dropped (with the
reason) and never costs the others. What a proposal's code does to the crashed function is
checked later, against the report (`repairbot.llm_check`).
"""

from __future__ import annotations

import ast
import io
import json
import math
import re
import tokenize
from dataclasses import dataclass
from typing import Any

MAX_REPLY_CHARS = 64 * 1024
"""Longer replies are cut before parsing: nothing useful is that long, and parsing has a cost."""
MAX_PROPOSALS = 6

_THINK = re.compile(r"<(think|thinking|reasoning|reflection)>.*?(</\1>|\Z)", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```[ \t]*([\w+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
MODEL_KINDS = ("edit", "action", "retry", "skip")
"""The kinds of repair a model is asked for: the prompt lists them (`$kinds` in `prompts/repair.txt`), the
reply's schema allows them. Each is read as a proposal of its own kind; `function` (a whole new `def`)
is read too, from the words models use for it. `repairbot.llm_check` makes each a protocol `Suggestion`
(`edit` and `function` a surgery, or a patch of the callee)."""
_KINDS = {
    "edit": "edit",
    "line_edit": "edit",
    "lines": "edit",
    "replace": "edit",
    "change": "edit",
    "fix": "edit",
    "code_change": "edit",
    "modify": "edit",
    "surgery": "function",
    "patch": "function",
    "patch_function": "function",
    "function": "function",
    "rewrite": "function",
    "new_function": "function",
    "diff": "function",
    "action": "action",
    "statement": "action",
    "statements": "action",
    "command": "action",
    "run": "action",
    "retry": "retry",
    "rerun": "retry",
    "re-run": "retry",
    "again": "retry",
    "skip": "skip",
    "skip_statement": "skip",
}
_WORDS = {"very high": 0.9, "high": 0.8, "medium": 0.5, "moderate": 0.5, "low": 0.2, "very low": 0.1}


class ReplyError(ValueError):
    """The reply holds nothing that can be read as our answer; the message says what it held."""


@dataclass(frozen=True)
class Proposal:
    """One suggestion as the model wrote it, its fields read but its code not yet checked.

    kind: `edit` (lines `start_line`..`end_line` of `function` become `code`), `function` (code
    is a whole new function, a class around it, or a diff), `action`, `retry` or `skip`.
    number: its place in the reply, from 1, for messages.
    """

    number: int
    kind: str
    explanation: str
    confidence: float
    code: str | None = None
    function: str | None = None
    start_line: int | None = None
    end_line: int | None = None
    note: str | None = None
    """Set when the kind was read from the content against the label."""


def read_object(text: str) -> dict[str, Any]:
    """The answer object in a reply's text.

    Tried in turn: each fenced block, the whole text, then each balanced `{...}` in it; each as
    JSON, then as a Python literal (single quotes, `True`, trailing commas). An object with a
    `suggestions` or `diagnosis` key wins over any other; a bare list is taken as the suggestions.
    """
    thought = _THINK.search(text[:MAX_REPLY_CHARS]) is not None
    text = _THINK.sub("", text[:MAX_REPLY_CHARS]).strip()
    if not text:
        raise ReplyError("the reply holds nothing but a <think> block" if thought else "the reply is empty")
    found: list[Any] = [v for v in map(_decode, _candidates(text)) if isinstance(v, (dict, list))]
    for value in found:
        answer = _as_answer(value)
        if answer is not None:
            return answer
    if found:
        raise ReplyError("the reply's JSON has neither `suggestions` nor `diagnosis`")
    raise ReplyError(f"the reply holds no JSON object (it begins {_begin(text)})")


def _candidates(text: str) -> list[str]:
    blocks = [body for _, body in _FENCE.findall(text)]
    return blocks + [text] + [span for start in _braces(text) if (span := _balanced(text, start))]


def _braces(text: str) -> list[int]:
    """Where an object may start: each `{` at the start of a line or after prose, at most 20."""
    return [m.start() for m in re.finditer(r"[{\[]", text)][:20]


def _balanced(text: str, start: int) -> str | None:
    """The bracketed span starting at `start`, skipping brackets inside strings; `None` if unclosed."""
    closing = {"{": "}", "[": "]"}
    stack: list[str] = []
    quote: str | None = None
    escaped = False
    for i in range(start, len(text)):
        c = text[i]
        if quote:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c in closing:
            stack.append(closing[c])
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                return text[start : i + 1]
    return None


def _decode(candidate: str) -> Any:
    candidate = candidate.strip()
    if not candidate or candidate[0] not in "{[":
        return None
    try:
        return json.loads(candidate)
    except (ValueError, RecursionError):
        pass
    return _python_literal(candidate)


def _python_literal(text: str) -> Any:
    """A Python literal, with JSON's `true`/`false`/`null` read as Python's; `None` if it is not one.

    `ast.literal_eval` evaluates no code: only literals, containers and unary minus.
    """
    names = {"true": "True", "false": "False", "null": "None"}
    try:
        tokens = [
            tok._replace(string=names[tok.string]) if tok.type == tokenize.NAME and tok.string in names else tok
            for tok in tokenize.generate_tokens(io.StringIO(text).readline)
        ]
        return ast.literal_eval(tokenize.untokenize(tokens))
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError, tokenize.TokenError, IndentationError):
        return None


def _as_answer(value: Any) -> dict[str, Any] | None:
    if isinstance(value, list):
        return {"suggestions": value} if value and all(isinstance(v, dict) and "kind" in v for v in value) else None
    if "suggestions" in value or "diagnosis" in value:
        return value
    inner = [v for v in value.values() if isinstance(v, dict)]
    return inner[0] if len(value) == 1 and inner and ("suggestions" in inner[0] or "diagnosis" in inner[0]) else None


def _begin(text: str) -> str:
    return repr(text[:60] + ("..." if len(text) > 60 else ""))


def read_proposals(answer: dict[str, Any]) -> tuple[list[Proposal], list[str]]:
    """The suggestions of an answer that could be read, and a reason for each one that could not."""
    items = answer.get("suggestions")
    if items is None:
        return [], []
    if isinstance(items, dict):
        items = [items]
    if not isinstance(items, list):
        return [], [f"`suggestions` is a {type(items).__name__}, not a list"]
    proposals: list[Proposal] = []
    dropped: list[str] = []
    for number, item in enumerate(items[:MAX_PROPOSALS], start=1):
        read = read_proposal(number, item)
        if isinstance(read, Proposal):
            proposals.append(read)
        else:
            dropped.append(f"dropped {read}")
    if len(items) > MAX_PROPOSALS:
        dropped.append(f"suggestions after the first {MAX_PROPOSALS} were not read")
    return proposals, dropped


def read_proposal(number: int, item: Any) -> Proposal | str:
    """One suggestion, or the reason it cannot be read, naming it by its place in the reply."""
    name = f"suggestion {number}"
    if not isinstance(item, dict):
        return f"{name} is not an object"
    label = str(item.get("kind") or item.get("type") or "").strip().lower().replace(" ", "_")
    code = _first_text(item, "new_code", "code", "replacement", "source", "diff", "patch")
    start, end = _lines(item)
    kind, note = _kind(label, code, start)
    if kind is None:
        return f"{name} has kind {label or 'none'!r} and no code: it is not a repair"
    if kind in ("edit", "function", "action") and code is None:
        field = "new_code" if kind == "edit" else "code"
        return f"{name} ({label or kind}) has no {field} (it is {'null' if item.get(field, 0) is None else 'missing'})"
    explanation = item.get("explanation") or item.get("reason") or item.get("description")
    return Proposal(
        number=number,
        kind=kind,
        explanation=str(explanation).strip() if explanation else "(the model gave no explanation)",
        confidence=confidence(item.get("confidence", item.get("score"))),
        code=code,
        function=str(item["function"]) if isinstance(item.get("function"), str) and item["function"] else None,
        start_line=start,
        end_line=end if end is not None else start,
        note=f"{name} {note}: taken as {'an action' if kind == 'action' else 'a new function'}" if note else None,
    )


def _kind(label: str, code: str | None, start: int | None) -> tuple[str | None, str | None]:
    """The kind, from the content where the label does not fit it, and a note when they disagree."""
    known = _KINDS.get(label)
    if known in ("retry", "skip"):
        return known, None
    if start is not None and known != "action":
        return "edit", None
    if code is None:
        return (known, None) if known in ("edit", "function", "action") else (None, None)
    whole = re.match(r"\s*(@|(async\s+)?def\s|class\s|---\s|diff\s|@@)", code) is not None
    kind = "function" if whole else "action"
    if known is not None and known != kind and not (known == "edit" and kind == "function"):
        return kind, f"is labelled {label!r} but its code is {'a whole function' if whole else 'statements'}"
    return kind, None


def _first_text(item: dict[str, Any], *keys: str) -> str | None:
    for key in keys:
        value = item.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, list) and value and all(isinstance(line, str) for line in value):
            return "\n".join(value)  # code given as a list of lines
    return None


def _lines(item: dict[str, Any]) -> tuple[int | None, int | None]:
    start, end = _int(item.get("start_line")), _int(item.get("end_line"))
    span = item.get("lines") or item.get("line_range")
    if start is None and isinstance(span, (list, tuple)) and span:
        start, end = _int(span[0]), _int(span[-1])
    elif start is None and isinstance(span, (str, int)):
        parts = re.findall(r"\d+", str(span))
        start, end = (int(parts[0]), int(parts[-1])) if parts else (None, None)
    if start is None:
        start = _int(item.get("line"))
    return start, end


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def confidence(value: Any) -> float:
    """A confidence in [0, 1]: 90 and "90%" are read as percentages, words as rough levels, else 0.5."""
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _WORDS:
            return _WORDS[word]
        try:
            value = float(word.rstrip("%")) / (100 if word.endswith("%") else 1)
        except ValueError:
            return 0.5
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return 0.5
    return min(1.0, value / 100 if value > 1 else float(value))
