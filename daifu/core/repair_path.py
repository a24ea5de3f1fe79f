"""A repair's own code path in a trial's copy: when it runs, and when it passes over work.

What a trial counts for each kind of decision (`daifu.core.horizon` judges the counts):

- an action, a retry, a skip, a skip of the iteration: each time it is applied (at the crash, and at
  each repeat of the same crash that the copy meets, where the copy applies it again as the real run
  would). A skip passes over the statement, a skip of the iteration the rest of the iteration; an
  action that leaves rows out of a batch (a local whose first dimension shrank) passes over those;
- a surgery: each time the run enters its own statements (`daifu.core.changes.statement_changes`:
  the new and changed statements of the new version, a changed compound statement's header), counted
  line by line by a trace function on the new version's code only (`LineCounter`). Its `continue`,
  `break` and `return` statements pass over the rest of the iteration, or of the loop; a statement of
  it that rebinds a local from itself to one with fewer rows (`x, y = x[keep], y[keep]`) passes over
  those rows (a local bound from other values, a chunk or the next episode's, drops nothing).

A row is an item of the first dimension of anything with a `shape` (a tensor, an array), or a record of
a list of them (dicts, one per sample).
"""

from __future__ import annotations

import ast
import sys
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import Any

from daifu.core.account import records
from daifu.core.changes import header_only, statement_changes
from daifu.core.decisions import Decision, Patch, Plays, Skip, SkipIteration, Surgery
from daifu.core.names import bound_names

_PASSING = {ast.Continue: "`continue`", ast.Break: "`break`", ast.Return: "`return`"}


def steps_of(decision: Decision) -> tuple[Decision, ...]:
    return decision.steps if isinstance(decision, Plays) else (decision,)


def changes_code(decision: Decision) -> bool:
    """Whether `decision` changes code (a surgery, a patch): then a repeat of its crash in the copy means
    the change did not fix it, and it is not applied again."""
    return any(isinstance(step, (Surgery, Patch)) for step in steps_of(decision))


def passes_over(decision: Decision) -> str | None:
    """What applying `decision` passes over by its kind (a skip: the statement; a skip of the iteration:
    the rest of the iteration); `None` when its kind passes over nothing (rows an action drops are
    measured, `dropped`)."""
    kinds = {type(step) for step in steps_of(decision)}
    if SkipIteration in kinds:
        return "the rest of the iteration (skipped)"
    if Skip in kinds:
        return "the faulty statement (skipped)"
    return None


def rows(value: Any) -> int | None:
    """The size of `value`'s first dimension, when it has a `shape`; the length of a list of records
    (`account.records`)."""
    try:
        shape = value.shape if hasattr(type(value), "shape") else None
    except Exception:  # noqa: BLE001 - a property of the program's that fails tells nothing
        return None
    if isinstance(shape, tuple) and shape and isinstance(shape[0], int):
        return shape[0]
    return records(value)


def sizes(namespace: Mapping[str, Any], names: Any = None) -> dict[str, int]:
    """The first dimension of each of `names` (by default every name) in `namespace` that has one."""
    found = {}
    for name in namespace if names is None else names:
        if name.startswith("@") or name not in namespace:
            continue
        size = rows(namespace[name])
        if size is not None:
            found[name] = size
    return found


def dropped(before: Mapping[str, int], after: Mapping[str, int]) -> tuple[int, str]:
    """The rows left out between two `sizes` of the same names (the most any one name lost), and which
    names lost them; `(0, "")` when none did."""
    lost = {name: before[name] - after[name] for name in before if name in after and after[name] < before[name]}
    if not lost:
        return 0, ""
    most = max(lost.values())
    names = ", ".join(f"`{name}`" for name in sorted(lost)[:3])
    return most, f"{most} rows of {names}"


@dataclass(frozen=True)
class Changed:
    """A surgery's own statements in its new version's code.

    filename: the new version's file name (`file (surgery N)`). lines: the file lines of its statements
    (of a changed compound statement, its header's). passing: the lines of its `continue`, `break` and
    `return` statements, with what they are. binds: the names each of its simple statements binds from
    their own values (reads and binds), by the statement's first line, with its last line.
    """

    filename: str
    lines: frozenset[int]
    passing: Mapping[int, str]
    binds: Mapping[int, tuple[tuple[str, ...], int]]


def changed(running: str, source: str, first_lineno: int, filename: str) -> Changed | None:
    """The own statements of a surgery turning `running` into `source` (both starting at file line
    `first_lineno`), in the code of `filename`; `None` when either does not parse as one function."""
    try:
        old, new = (ast.parse(textwrap.dedent(text)).body for text in (running, source))
    except SyntaxError:
        return None
    if len(old) != 1 or len(new) != 1 or not isinstance(old[0], ast.FunctionDef | ast.AsyncFunctionDef) \
            or not isinstance(new[0], ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    offset = first_lineno - 1
    lines: set[int] = set()
    passing: dict[int, str] = {}
    binds: dict[int, tuple[tuple[str, ...], int]] = {}
    for statement, header_changed in statement_changes(old[0].body, new[0].body):
        shown = header_only(statement) if header_changed else statement
        last = _header_end(statement) if header_changed else (statement.end_lineno or statement.lineno)
        lines.update(range(statement.lineno + offset, last + offset + 1))
        for node in ast.walk(shown):
            for kind, word in _PASSING.items():
                if isinstance(node, kind):
                    passing[node.lineno + offset] = f"{word} at line {node.lineno + offset}"
            if isinstance(node, ast.stmt) and not hasattr(node, "body"):
                read = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
                names = tuple(sorted(bound_names(node, imports=False) & read))
                if names:
                    binds[node.lineno + offset] = (names, (node.end_lineno or node.lineno) + offset)
    return Changed(filename, frozenset(lines), passing, binds)


def _header_end(statement: ast.stmt) -> int:
    """The last line of a compound statement's header: the line before its first body statement."""
    bodies = [block[0].lineno for name in ("body", "handlers", "orelse", "finalbody", "cases")
              if isinstance(block := getattr(statement, name, None), list) and block]
    return max(min(bodies) - 1, statement.lineno) if bodies else statement.lineno


class LineCounter:
    """Counts, line by line, the runs of a surgery's own statements in a trial's copy.

    `fired()` is called each time the run enters them (from a line that is not theirs), `passed(what)`
    each time one of its `continue`, `break` or `return` statements runs, and `passed(what, rows)` when
    one of its statements rebound a local to one with fewer rows. Only frames of the new version's code
    are traced (a trace function is asked, at each call, whether the frame is one).
    """

    def __init__(self, change: Changed, fired: Callable[[], None], passed: Callable[[str, int], None]) -> None:
        self.change = change
        self.fired = fired
        self.passed = passed
        self._inside: set[int] = set()
        self._pending: dict[int, tuple[dict[str, int], tuple[str, ...], int, int]] = {}

    def install(self) -> None:
        sys.settrace(self._call)

    def _call(self, frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename == self.change.filename:
            return self._event
        return None

    def _event(self, frame: FrameType, event: str, arg: Any) -> Any:
        key = id(frame)
        line = frame.f_lineno
        pending = self._pending.get(key)
        if pending is not None and (event != "line" or not pending[2] <= line <= pending[3]):
            del self._pending[key]
            before, names, first, _last = pending
            count, what = dropped(before, sizes(frame.f_locals, names))
            if count:
                self.passed(f"{what} (line {first})", count)
        if event == "return":
            self._inside.discard(key)
        if event != "line":
            return self._event
        change = self.change
        if line not in change.lines:
            self._inside.discard(key)
            return self._event
        if key not in self._inside:
            self._inside.add(key)
            self.fired()
        if line in change.passing:
            self.passed(change.passing[line], 0)
        bound = change.binds.get(line)
        if bound is not None and key not in self._pending:
            names, last = bound
            self._pending[key] = (sizes(frame.f_locals, names), names, line, last)
        return self._event
