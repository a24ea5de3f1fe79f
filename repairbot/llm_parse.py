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
_CLOSE = re.compile(r"</(think|thinking|reasoning|reflection)>", re.IGNORECASE)
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


def split_reasoning(text: str) -> tuple[str, str]:
    """A reply's reasoning and the rest: each `<think>...</think>` block (an unclosed one runs to the
    end), and all before a closing `</think>` that no opening tag precedes (DeepSeek-R1's chat template
    puts the opening tag in the prompt, so the reply holds only the closing one)."""
    text = text[:MAX_REPLY_CHARS]
    reasoning = [m.group(0) for m in _THINK.finditer(text)]
    rest = _THINK.sub("", text)
    closes = list(_CLOSE.finditer(rest))
    if closes:
        reasoning.insert(0, rest[: closes[-1].start()])
        rest = rest[closes[-1].end() :]
    return "\n".join(reasoning), rest.strip()


def read_object(text: str) -> dict[str, Any]:
    """The answer object in a reply's text, its reasoning left out (`split_reasoning`).

    Tried in turn: each fenced block, the whole text, then each balanced `{...}` in it; each as
    JSON, then as JSON with `//` comments, then as a Python literal (single quotes, `True`,
    trailing commas). An object with a `suggestions` or `diagnosis` key wins over any other; a bare
    list is taken as the suggestions.
    """
    return read_noted(text)[0]


def read_noted(text: str) -> tuple[dict[str, Any], list[str]]:
    """`read_object`, and notes on what was put right to read it (reasoning left out, comments removed)."""
    reasoning, rest = split_reasoning(text)
    if not rest:
        raise ReplyError("the reply holds nothing but a <think> block" if reasoning.strip() else "the reply is empty")
    notes = []
    if reasoning.strip() and _CLOSE.search(text) and not _THINK.search(text[:MAX_REPLY_CHARS]):
        notes.append("left out the reasoning before `</think>` (the reply holds no opening tag)")
    candidates = _candidates(rest)
    found: list[tuple[Any, str]] = [(v, c) for c in candidates if isinstance(v := decode(c), (dict, list))]
    for value, candidate in found:
        answer = _as_answer(value)
        if answer is not None:
            if without_comments(candidate) != candidate and _json(candidate) is None:
                notes.append("removed `//` comments from the reply's JSON")
            return answer, notes
    if found:
        raise ReplyError("the reply's JSON has neither `suggestions` nor `diagnosis`")
    raise ReplyError(f"the reply holds no JSON object (it begins {_begin(text)})")


def last_answer(text: str) -> dict[str, Any] | None:
    """The last complete answer object in `text` (a model's reasoning: its drafts come first, its
    conclusion last), or `None`."""
    spans = [(m.start(), m.group(2)) for m in _FENCE.finditer(text)]
    spans += [(start, span) for start in _braces(text, from_end=True) if (span := _balanced(text, start))]
    for _, candidate in sorted(spans, key=lambda s: -s[0]):
        value = decode(candidate)
        answer = _as_answer(value) if isinstance(value, (dict, list)) else None
        if answer is not None:
            return answer
    return None


def _candidates(text: str) -> list[str]:
    blocks = [body for _, body in _FENCE.findall(text)]
    return blocks + [text] + [span for start in _braces(text) if (span := _balanced(text, start))]


def _braces(text: str, from_end: bool = False) -> list[int]:
    """Where an object may start: each `{` or `[`, at most 20 (the first, or the last)."""
    starts = [m.start() for m in re.finditer(r"[{\[]", text)]
    return starts[-20:] if from_end else starts[:20]


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


def decode(candidate: str) -> Any:
    """A JSON value (comments allowed) or a Python literal in `candidate`; `None` if it is neither."""
    candidate = candidate.strip()
    if not candidate or candidate[0] not in "{[":
        return None
    value = _json(candidate)
    if value is not None:
        return value
    uncommented = without_comments(candidate)
    value = _json(uncommented) if uncommented != candidate else None
    return value if value is not None else _python_literal(uncommented)


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def without_comments(text: str) -> str:
    """`text` without `//` and `/* */` comments outside strings (JSON with comments, as JavaScript
    writes it); a URL inside a string keeps its `//`."""
    kept: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            kept.append(c)
            if c == "\\" and i + 1 < len(text):
                kept.append(text[i + 1])
                i += 1
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
            kept.append(c)
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = len(text) if end < 0 else end + 2
            continue
        else:
            kept.append(c)
        i += 1
    return "".join(kept)


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
