"""Edits of the function's source at the level of syntax nodes, keeping every other character.

An edit names nodes of the parsed function (`View.tree`) and the text that replaces each; the
text of the function is changed only inside those nodes' spans, so the surgery reads as a
one-line diff and keeps the user's comments, layout and quotes. A statement can also be inserted
before another, or replaced by several lines, at its indentation. The result is `None` unless it
is still exactly one `def` that parses.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from repairbot.generate.view import View
from repairbot.signs import parse_def

_ATOMS = (
    ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.List, ast.Dict, ast.Set, ast.ListComp, ast.SetComp,
    ast.DictComp, ast.GeneratorExp, ast.JoinedStr,
)


def text(view: View, node: ast.AST) -> str:
    """The source text of `node`, as written."""
    start, end = _span(view, node)
    return view.site.source[start:end]


def atom(view: View, node: ast.AST) -> str:
    """The text of `node`, in parentheses unless a method can be called on it as it stands."""
    written = text(view, node)
    if isinstance(node, _ATOMS) or (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return written
    return f"({written})"


def replace(view: View, changes: Sequence[tuple[ast.AST, str]]) -> str | None:
    """The function's source with each node's text replaced; `None` if spans overlap or it does not parse."""
    if not changes:
        return None
    spans = sorted((_span(view, node) + (new,) for node, new in changes), key=lambda s: s[0])
    for (_, end, _), (start, _, _) in zip(spans, spans[1:]):
        if start < end:
            return None
    source = view.site.source
    for start, end, new in reversed(spans):
        source = source[:start] + new + source[end:]
    return _checked(view, source)


def text_with(view: View, whole: ast.AST, changes: list[tuple[ast.AST, str]]) -> str:
    """The text of `whole` (a statement, a call) with the text of each node in it replaced."""
    start, end = _span(view, whole)
    spans = sorted(((*_span(view, node), new) for node, new in changes), key=lambda s: s[0], reverse=True)
    written = view.site.source[start:end]
    for node_start, node_end, new in spans:
        written = written[: node_start - start] + new + written[node_end - start :]
    return written


def replace_between(view: View, before: ast.AST, after: ast.AST, old: str, new: str) -> str | None:
    """The function's source with the first `old` between the end of `before` and the start of `after`
    (an operator, never inside either operand) replaced by `new`."""
    start, end = _span(view, before)[1], _span(view, after)[0]
    gap = view.site.source[start:end]
    if old not in gap:
        return None
    source = view.site.source
    return _checked(view, source[:start] + gap.replace(old, new, 1) + source[end:])


def insert_before(view: View, statement: ast.stmt, lines: str) -> str | None:
    """The function's source with `lines` (a statement or more) inserted before `statement`, at its indentation."""
    row = statement.lineno - 1
    indent = _indent(view.lines[row])
    block = "".join(indent + line + "\n" for line in lines.splitlines())
    return _checked(view, "".join(view.lines[:row]) + block + "".join(view.lines[row:]))


def with_line_before(view: View, source: str | None, statement: ast.stmt, line: str) -> str | None:
    """`source` (a new version of the view's function, changed at or after `statement`) with `line` inserted
    before `statement`, at its indentation."""
    if source is None:
        return None
    lines = source.splitlines(keepends=True)
    row = statement.lineno - 1
    return _checked(view, "".join(lines[:row]) + _indent(lines[row]) + line + "\n" + "".join(lines[row:]))


def replace_statement(view: View, statement: ast.stmt, lines: str) -> str | None:
    """The function's source with the whole of `statement` replaced by `lines`, at its indentation.

    Only for a statement alone on its lines (not `a = 1; b = 2`), so nothing else is lost.
    """
    return replace_statements(view, statement, statement, lines)


def replace_statements(view: View, first: ast.stmt, last: ast.stmt, lines: str) -> str | None:
    """The function's source with the statements from `first` to `last` (of one block) replaced by `lines`,
    at the indentation of `first`; only when no other statement or comment shares their lines."""
    top, bottom = first.lineno - 1, (last.end_lineno or last.lineno) - 1
    start, end = _span(view, first)[0], _span(view, last)[1]
    line_start = sum(len(line) for line in view.lines[:top])
    line_end = sum(len(line) for line in view.lines[: bottom + 1])
    before, after = view.site.source[line_start:start], view.site.source[end:line_end]
    if before.strip() or after.strip():  # another statement, or a comment, shares their lines
        return None
    indent = _indent(view.lines[top])
    block = "".join(indent + line + "\n" for line in lines.splitlines())
    return _checked(view, "".join(view.lines[:top]) + block + "".join(view.lines[bottom + 1 :]))


def _checked(view: View, source: str) -> str | None:
    if source == view.site.source:
        return None
    tree = parse_def(source)
    if tree is None or len(tree.body) != 1 or not isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    return source


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _span(view: View, node: ast.AST) -> tuple[int, int]:
    """Character offsets of `node` in the site's source (the tree was parsed dedented, in UTF-8 columns)."""
    end_line, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
    if end_line is None or end_col is None:
        raise ValueError(f"{type(node).__name__} has no position")
    return _offset(view, node.lineno, node.col_offset), _offset(view, end_line, end_col)  # type: ignore[attr-defined]


def _offset(view: View, line: int, byte_col: int) -> int:
    text_line = view.lines[line - 1]
    dedented = text_line[view.margin :]
    chars = len(dedented.encode("utf-8")[:byte_col].decode("utf-8", "ignore"))
    return sum(len(item) for item in view.lines[: line - 1]) + view.margin + chars
