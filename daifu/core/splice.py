"""A surgery's new tree built from the old one, when the new source replaces statements line for line.

A one-line fix keeps the function's length and its statements' places: only the statements on the
changed lines differ. Those are parsed alone, and the new tree is the old one with them in place:
the blocks around them are copied, every other node is the old tree's own. Sharing is safe because
a version's tree is never changed once built, and what is stamped on its statements (their paths,
the numbers of `try ... finally` statements) depends only on places and positions, which are the
same in both. Parsing the whole function cost a surgery 0.6 ms of its 4 on a 100-line function.
"""

from __future__ import annotations

import ast
import copy
from typing import Any

from daifu.core.blocks import COMPOUND
from daifu.core.changes import Change, changed_lines, statements_at


def splice(old_fdef: ast.FunctionDef, old_lines: list[str], new_lines: list[str], first_lineno: int
           ) -> tuple[ast.FunctionDef, Change] | None:
    """The tree of the new source `new_lines` of a function whose old tree and lines are
    `old_fdef` and `old_lines` (both starting at file line `first_lineno`), and what changed;
    `None` unless the change replaces one run of simple statements of one block by as many simple
    statements on the same lines (the new tree is then built by parsing the whole source)."""
    if len(new_lines) != len(old_lines):
        return None
    low, old_high, _new_high = changed_lines(old_lines, new_lines, first_lineno)
    if low == old_high:
        return copy.copy(old_fdef), Change((), 0, [], [], old_high)
    found = statements_at(old_fdef, low, old_high)
    if found is None or not found[2]:
        return None
    block, start, old = found
    first, last = old[0].lineno, old[-1].end_lineno or old[-1].lineno
    if any(isinstance(s, COMPOUND) for s in old) or first > low or last < old_high - 1:
        return None
    region = new_lines[first - first_lineno : last - first_lineno + 1]
    if _indentation(region) != _indentation(old_lines[first - first_lineno : last - first_lineno + 1]):
        return None  # tabs where spaces were, or the other way: the whole source may not parse
    new = _statements(region, first)
    if new is None or len(new) != len(old) or any(isinstance(s, COMPOUND) for s in new):
        return None
    for offset, statement in enumerate(new):
        statement._daifu_path = block + (start + offset,)  # type: ignore[attr-defined]
    old_end = (old[-1].end_lineno, old[-1].end_col_offset)
    new_end = (new[-1].end_lineno, new[-1].end_col_offset)
    fdef = copy.copy(old_fdef)
    _end(fdef, old_end, new_end)
    holder: Any = fdef
    name = "body"
    for position in range(0, len(block), 2):
        statements = _own_list(holder, name, old_end, new_end)
        holder = statements[block[position]] = copy.copy(statements[block[position]])
        _end(holder, old_end, new_end)
        name = block[position + 1]
    _own_list(holder, name, old_end, new_end)[start : start + len(old)] = new
    return fdef, Change(block, start, old, new, old_high)


def _statements(lines: list[str], first: int) -> list[ast.stmt] | None:
    """The statements of `lines` (file lines from `first`, at their own indentation), parsed alone
    with their file positions (under an `if 1:` header, as `parse_function` parses a method); `None`
    when they do not parse alone."""
    try:
        module = ast.parse("\n" * (first - 2) + "if 1:\n" + "\n".join(lines) + "\n")
    except SyntaxError:
        return None
    header = module.body[0] if len(module.body) == 1 else None
    return header.body if isinstance(header, ast.If) else None


def _indentation(lines: list[str]) -> set[str]:
    """The characters that indent `lines` (their own indentation parses alone, not necessarily
    beside the lines around them when it mixes tabs and spaces differently)."""
    return {char for line in lines if line.strip() for char in line[: len(line) - len(line.lstrip())]}


def _end(node: Any, old_end: tuple[Any, Any], new_end: tuple[Any, Any]) -> None:
    """A copied node that ended where the replaced statements did ends where the new ones do."""
    if (getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)) == old_end:
        node.end_lineno, node.end_col_offset = new_end


def _own_list(holder: Any, name: str, old_end: tuple[Any, Any], new_end: tuple[Any, Any]) -> list[ast.stmt]:
    """Give the copied node `holder` its own copy of its statement list `name` (`body`, `orelse`,
    `finalbody`, or the body of clause `handlers.K` / `cases.K`, the clause copied too) and return it."""
    field, _, index = name.partition(".")
    if index:
        clauses = list(getattr(holder, field))
        clause = clauses[int(index)] = copy.copy(clauses[int(index)])
        _end(clause, old_end, new_end)
        setattr(holder, field, clauses)
        holder, field = clause, "body"
    statements: list[ast.stmt] = list(getattr(holder, field))
    setattr(holder, field, statements)
    return statements


def shared_after(shared: frozenset[int], change: Change, shift: int) -> frozenset[int]:
    """The lines where more than one statement sits (`blocks.shared_lines`) after `change`, from
    those before it (`shared`): the replaced statements' lines are the new ones' alone, and the lines
    after them are `shift` lines down (when the new source is longer by `shift`)."""
    first, last = change.lines() or (change.end, change.end - 1)  # none replaced: only lines inserted
    count: dict[int, int] = {}
    for statement in change.new:
        for line in range(statement.lineno, (statement.end_lineno or statement.lineno) + 1):
            count[line] = count.get(line, 0) + 1
    kept = {line if line < first else line + shift for line in shared if not first <= line <= last}
    return frozenset(kept | {line for line, n in count.items() if n > 1})
