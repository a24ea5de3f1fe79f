"""Unified diffs of a function's source, numbered as in the user's file.

Surgery and repair-bot suggestions are shown as a diff before they are applied, so the person
approving sees exactly what changes; the hunk headers speak in the file's line numbers, like
every other place DaiFu shows code.
"""

from __future__ import annotations

import difflib
import re

from daifu.console.colour import paint

_HUNK = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


def source_diff(old: str, new: str, first_lineno: int, name: str, colour: bool) -> str:
    """The diff from `old` to `new`, both starting at file line `first_lineno`; '' when equal."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), f"{name} (running)", f"{name} (new)"
    )
    return "".join(_styled(_renumbered(line.rstrip("\n"), first_lineno - 1), colour) + "\n" for line in lines)


def _renumbered(line: str, offset: int) -> str:
    match = _HUNK.match(line)
    if match is None or offset == 0:
        return line
    old_start, old_len, new_start, new_len = match.groups()
    head = f"@@ -{int(old_start) + offset}{old_len or ''} +{int(new_start) + offset}{new_len or ''} @@"
    return head + line[match.end() :]


def _styled(line: str, colour: bool) -> str:
    if line.startswith(("+++", "---")):
        return paint(line, "bold", colour)
    if line.startswith("@@"):
        return paint(line, "cyan", colour)
    if line.startswith("+"):
        return paint(line, "green", colour)
    if line.startswith("-"):
        return paint(line, "red", colour)
    return line
