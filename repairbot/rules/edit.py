"""Source edits for surgeries: change the faulty statement, keep every other character.

The rules engine proposes the whole new `def`, so a surgery reads as a one-line diff; an edit
that does not leave valid Python is dropped rather than proposed.
"""

from __future__ import annotations

import ast
import io
import textwrap
import tokenize
from collections.abc import Callable

from repairbot import parsing

Transform = Callable[[str], str]


def parse_def(source: str) -> ast.Module | None:
    """The module holding the `def` in `source`, which may be indented (a method); line 1 is source's.

    `None` for anything that does not parse, including code nested too deeply for the parser.
    """
    return parse(textwrap.dedent(source))


def parse(text: str) -> ast.Module | None:
    """`text` parsed, or `None` for anything the parser refuses (reports are untrusted: see `repairbot.parsing`)."""
    try:
        return parsing.parse(text)
    except parsing.REFUSED:
        return None


def edit_statement(source: str, first_lineno: int, lineno: int, line_count: int, transform: Transform) -> str | None:
    """`source` with the statement at file line `lineno` (spanning `line_count` lines) transformed.

    Returns `None` when the transform changed nothing or left code that does not parse.
    """
    lines = source.splitlines(keepends=True)
    start = lineno - first_lineno
    if not 0 <= start < len(lines):
        return None
    stop = min(len(lines), start + max(1, line_count))
    block = "".join(lines[start:stop])
    new_block = transform(block)
    if new_block == block:
        return None
    if not new_block.endswith("\n") and block.endswith("\n"):
        new_block += "\n"
    new_source = "".join(lines[:start]) + new_block + "".join(lines[stop:])
    return new_source if parse_def(new_source) is not None else None


def replace_text(old: str, new: str, *, unless: str | None = None) -> Transform:
    """A transform replacing `old` by `new`, skipping places already reading `unless`."""

    def transform(block: str) -> str:
        if unless is None:
            return block.replace(old, new)
        marker = "\0"
        return block.replace(unless, marker).replace(old, new).replace(marker, unless)

    return transform


def replace_operator(old: str, new: str) -> Transform:
    """A transform replacing the operator token `old` (never inside a string or a comment)."""

    def transform(block: str) -> str:
        return _replace_tokens(block, lambda tok, prev, nxt: tok.type == tokenize.OP and tok.string == old, new)

    return transform


def wrap_name(name: str, template: str) -> Transform:
    """A transform rewriting each read of variable `name` as `template.format(name)`.

    Attribute names (`obj.name`), keyword names (`f(name=...)`) and assignment targets stay.
    """

    def is_read(tok: tokenize.TokenInfo, prev: tokenize.TokenInfo | None, nxt: tokenize.TokenInfo | None) -> bool:
        if tok.type != tokenize.NAME or tok.string != name:
            return False
        after_dot = prev is not None and prev.string == "."
        assigned = (
            nxt is not None
            and nxt.type == tokenize.OP
            and nxt.string.endswith("=")
            and nxt.string not in ("==", "<=", ">=", "!=")
        )
        return not after_dot and not assigned

    def transform(block: str) -> str:
        return _replace_tokens(block, is_read, template.format(name))

    return transform


def _replace_tokens(
    block: str,
    wanted: Callable[[tokenize.TokenInfo, tokenize.TokenInfo | None, tokenize.TokenInfo | None], bool],
    replacement: str,
) -> str:
    found = tokens(block)
    lines = block.splitlines(keepends=True)
    hits = [
        tok
        for i, tok in enumerate(found)
        if wanted(tok, found[i - 1] if i else None, found[i + 1] if i + 1 < len(found) else None)
    ]
    for tok in reversed(hits):  # from the end, so earlier columns stay valid
        row, col = tok.start
        _, end_col = tok.end
        text = lines[row - 1]
        lines[row - 1] = text[:col] + replacement + text[end_col:]
    return "".join(lines)


def tokens(block: str) -> list[tokenize.TokenInfo]:
    """The significant tokens of a fragment of code (no layout, no comments)."""
    skip = {tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT, tokenize.ENDMARKER}
    result = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(block).readline):
            if tok.type not in skip:
                result.append(tok)
    except (tokenize.TokenError, SyntaxError):
        pass  # an unfinished fragment (or, from 3.12's tokenizer, an invalid one): the tokens read so far stand
    return result


def replace_with(text: str) -> Transform:
    """A transform replacing the whole statement by `text`, at the statement's indentation."""

    def transform(block: str) -> str:
        indent = block[: len(block) - len(block.lstrip())]
        return "".join(indent + line + "\n" for line in text.splitlines())

    return transform


def in_loop(source: str, first_lineno: int, lineno: int) -> bool:
    """Whether the statement at file line `lineno` runs inside a `for` or `while` of this function."""
    tree = parse_def(source)
    if tree is None:
        return False
    target = lineno - first_lineno + 1
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            body_lines = [n for stmt in node.body for n in (stmt.lineno, stmt.end_lineno or stmt.lineno)]
            if body_lines and min(body_lines) <= target <= max(body_lines) and not _in_nested_def(tree, node, target):
                return True
    return False


def _in_nested_def(tree: ast.Module, loop: ast.AST, target: int) -> bool:
    """Whether a `def` or `class` between `loop` and line `target` would make `continue` illegal."""
    for node in ast.walk(loop):
        if node is not loop and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            if node.lineno <= target <= (node.end_lineno or node.lineno):
                return True
    return False


def statement_node(block: str) -> ast.stmt | None:
    """The one statement in `block`, parsed; `None` for a compound header or a fragment."""
    tree = parse(textwrap.dedent(block))
    return tree.body[0] if tree is not None and len(tree.body) == 1 else None
