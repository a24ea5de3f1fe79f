"""What the approval page shows of code: a suggestion as a diff, the faulty statement in context.

Lines are returned as data (kind and text); the page's template colours them and escapes the text.
Numbers are the user's file lines, as everywhere DaiFu shows code.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

_HUNK = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


@dataclass(frozen=True)
class DiffLine:
    """kind: `file` (a ---/+++ line), `hunk` (@@), `add`, `del` or `same`."""

    kind: str
    text: str


@dataclass(frozen=True)
class SourceLine:
    number: int
    text: str
    faulty: bool


def source_diff(old: str, new: str, first_lineno: int, name: str) -> list[DiffLine]:
    """The unified diff from `old` to `new` (both starting at file line `first_lineno`); empty when equal."""
    lines = difflib.unified_diff(
        old.splitlines(), new.splitlines(), f"{name} (running)", f"{name} (suggested)", lineterm=""
    )
    return [_classified(_renumbered(line, first_lineno - 1)) for line in lines]


def added(code: str) -> list[DiffLine]:
    """Code that is only added (an action, a new callee): every line an addition."""
    return [DiffLine("add", "+" + line) for line in code.splitlines()]


def in_context(source: str, first_lineno: int, lineno: int, statement: str, radius: int = 6) -> list[SourceLine]:
    """The lines of `source` around the faulty statement (file lines `lineno`..., as many as it has)."""
    lines = source.splitlines()
    start = lineno - first_lineno
    span = max(1, len(statement.strip("\n").splitlines()))
    low, high = max(0, start - radius), min(len(lines), start + span + radius)
    return [SourceLine(first_lineno + i, lines[i], start <= i < start + span) for i in range(low, high)]


def _renumbered(line: str, offset: int) -> str:
    match = _HUNK.match(line)
    if match is None or offset == 0:
        return line
    old_start, old_len, new_start, new_len = match.groups()
    head = f"@@ -{int(old_start) + offset}{old_len or ''} +{int(new_start) + offset}{new_len or ''} @@"
    return head + line[match.end():]


def _classified(line: str) -> DiffLine:
    if line.startswith(("+++", "---")):
        return DiffLine("file", line)
    if line.startswith("@@"):
        return DiffLine("hunk", line)
    if line.startswith("+"):
        return DiffLine("add", line)
    if line.startswith("-"):
        return DiffLine("del", line)
    return DiffLine("same", line)
