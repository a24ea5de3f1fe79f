"""The statements a surgery runs a second time: from where its new version resumes down to the crash.

A surgery that changes a statement above the faulty one, in the iteration the run is in, resumes at
the first changed statement (`daifu.core.surgery.resume_path`), so every statement from there down to
the faulty one runs again, with the values it finds: a random draw is drawn again, an append to an
outer list appended again. Whoever approves the repair, or reads what was done, is told which ones.
The resume point is the runtime's own, worked out on throwaway versions as `daifu.console.resuming`
does; the faulty statement's counterpart in the new source is found by its line (the lines around a
change keep their text).
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass, field

from daifu.core.blocks import COMPOUND, Path, block_of, child_blocks, locate, path_of
from daifu.core.crash import Crash
from daifu.core.decisions import Decision, Surgery
from daifu.core.surgery import SurgeryRefused, resume_path
from daifu.core.version import Version, build_version


@dataclass(frozen=True)
class Rerun:
    """A statement of the new source that runs between the resume point and the crash: its file line and
    its text (a compound statement's header only). node: the statement; whole: whether all of it runs
    again (else only the header of the compound statement the crash is in); new: whether the surgery
    inserted it — it never ran, so it runs once, not a second time."""

    lineno: int
    text: str
    node: ast.stmt | None = field(default=None, compare=False, repr=False)
    whole: bool = True
    new: bool = False

    def describe(self) -> str:
        return f"line {self.lineno} `{self.text}`" + (" (new)" if self.new else "")


def reruns(crash: Crash, decision: Decision) -> list[Rerun]:
    """The statements `decision` runs a second time before the faulty one's counterpart; none for any
    decision but a surgery, for a surgery that resumes at the faulty statement, or one the runtime refuses."""
    if not isinstance(decision, Surgery):
        return []
    try:
        old = _version(crash.source, crash.first_lineno, crash.filename)
        new = _version(decision.source, crash.first_lineno, crash.filename)
        found = locate(old.fdef.body, crash.lineno, None)
        if found is None:
            return []
        path, same, _finals = resume_path(old, new, path_of(found[0]))
    except (SyntaxError, ValueError, SurgeryRefused):
        return []
    if same:
        return []
    target = counterpart(old.lines, new.lines, crash.first_lineno, crash.lineno)
    added = inserted(old.lines, new.lines, crash.first_lineno)
    return [
        Rerun(node.lineno, new.statement_text(node, header_only=isinstance(node, COMPOUND)).splitlines()[0], node,
              not node.lineno < target <= (node.end_lineno or node.lineno),
              all(line in added for line in range(node.lineno, (node.end_lineno or node.lineno) + 1)))
        for node in _between(new.fdef, path, target)
    ]


def describe(found: list[Rerun]) -> str:
    """The statements in a phrase: what a person reads before approving. The lines the surgery inserted run
    once; only the others run a second time."""
    again = [r for r in found if not r.new]
    inserted = [r for r in found if r.new]
    parts = []
    if inserted:
        parts.append(f"{_listed(inserted)} (new) run{'s' if len(inserted) == 1 else ''} first")
    if again:
        parts.append(f"{_listed(again)} run{'s' if len(again) == 1 else ''} a second time")
    return f"{', then '.join(parts)} (the repair resumes above the crash)"


def _listed(found: list[Rerun]) -> str:
    shown = [f"line {r.lineno} `{r.text}`" for r in found[:6]]
    return ", ".join(shown) + (f" and {len(found) - 6} more" if len(found) > 6 else "")


def counterpart(old: list[str], new: list[str], first_lineno: int, lineno: int) -> int:
    """The line of `new` that takes the place of line `lineno` of `old` (both start at `first_lineno`):
    the same line when it was kept, its place in a replacement of the same size, else the last line of
    the replacement."""
    index = lineno - first_lineno
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if i1 <= index < i2:
            same_size = tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1)
            return first_lineno + (j1 + index - i1 if same_size else max(j1, j2 - 1))
    return lineno


def inserted(old: list[str], new: list[str], first_lineno: int) -> set[int]:
    """The lines of `new` that take no line of `old`'s place: those of an insertion, and those a
    replacement holds past the size of what it replaces (its first lines count as the old ones, changed)."""
    found: set[int] = set()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag in ("insert", "replace"):
            found.update(first_lineno + j for j in range(j1 + (i2 - i1 if tag == "replace" else 0), j2))
    return found


def _between(fdef: ast.FunctionDef, start: Path, target: int) -> list[ast.stmt]:
    """The statements run from `start` up to the one at line `target`: those after `start` in its
    block, and, for a compound statement holding `target`, its header and then its block's statements."""
    block: list[ast.stmt] = fdef.body
    for position in range(0, len(start) - 1, 2):
        block = block_of(block[start[position]], start[position + 1])
    index = start[-1]
    found: list[ast.stmt] = []
    while index < len(block):
        statement = block[index]
        if statement.lineno == target:
            return found
        found.append(statement)
        if statement.lineno < target <= (statement.end_lineno or statement.lineno):
            inner = next((child for _, child in child_blocks(statement) if _holds(child, target)), None)
            if inner is None:
                return found
            block, index = inner, 0
            continue
        index += 1
    return found


def _holds(block: list[ast.stmt], line: int) -> bool:
    return bool(block) and block[0].lineno <= line <= (block[-1].end_lineno or block[-1].lineno)


def _version(source: str, first_lineno: int, filename: str) -> Version:
    return build_version(0, source, first_lineno, filename, 0, (), fast=False)
