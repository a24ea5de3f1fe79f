"""Reading a function's source and parsing it with the user's own line and column numbers."""

from __future__ import annotations

import ast
import inspect
from types import FunctionType

from daifu.core.blocks import child_blocks


class SourceUnavailable(Exception):
    """The function's source cannot be read (defined through `exec`, shipped without source)."""


def function_source(fn: FunctionType) -> tuple[str, int]:
    """The source of `fn` (decorators included) and the file line where it starts."""
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError) as error:
        raise SourceUnavailable(str(error)) from None
    return "".join(lines), max(first, 1)


def parse_function(source: str, first_lineno: int, name: str | None = None) -> ast.FunctionDef:
    """Parse `source` (one `def`, possibly indented) with locations as in the user's file.

    An indented method is parsed under an `if 1:` header instead of being dedented, so that
    column offsets, which tracebacks use for their carets, stay those of the file.
    """
    indented = source[:1] in " \t"
    header = "if 1:\n" if indented else ""
    blank = first_lineno - 1 - len(header.splitlines())  # blank lines put the code on its file lines:
    shift = 0  # cheaper than moving every node afterwards (`ast.increment_lineno`)
    try:
        module = ast.parse("\n" * max(blank, 0) + header + source)
        shift = min(blank, 0)
    except SyntaxError:
        import textwrap  # only for a source the `if 1:` header cannot hold: not worth 1 ms on every import

        indented, shift = False, first_lineno - 1
        try:
            module = ast.parse(textwrap.dedent(source))
        except SyntaxError as error:  # said with the file's lines, as every message of DaiFu's
            for attribute in ("lineno", "end_lineno"):
                if getattr(error, attribute, None):
                    setattr(error, attribute, getattr(error, attribute) + shift)
            raise
    body = module.body[0].body if indented and isinstance(module.body[0], ast.If) else module.body
    defs = [node for node in body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if len(defs) != 1 or len(body) != 1:
        raise SyntaxError("the source must hold exactly one function definition")
    fdef = defs[0]
    if name is not None and fdef.name != name:
        raise SyntaxError(f"the source defines {fdef.name!r}, not {name!r}")
    if shift:
        ast.increment_lineno(module, shift)
    return fdef  # type: ignore[return-value]


def normalize(fdef: ast.FunctionDef) -> ast.FunctionDef:
    """Split `with a, b:` into nested withs.

    Nested single-item `with` statements behave exactly as one multi-item statement, and give each
    context manager its own place to resume in. The decorators stay in the tree: compiled inside
    a factory that never runs, they are never applied again, and they make the code start on the
    first decorator's line, as the original's did (`inspect.getsource` reads from there).
    Only statements are walked (a `with` is never inside an expression), and nested scopes are
    left alone: walking every node cost a surgery 0.9 ms.
    """
    _split_withs(fdef.body)
    return fdef


def _split_withs(block: list[ast.stmt]) -> None:
    for statement in block:
        for _field, child in child_blocks(statement):
            _split_withs(child)
        if isinstance(statement, ast.With) and len(statement.items) > 1:
            inner: list[ast.stmt] = statement.body
            for item in reversed(statement.items[1:]):
                nested = ast.copy_location(ast.With(items=[item], body=inner), item.context_expr)
                nested.end_lineno, nested.end_col_offset = statement.end_lineno, statement.end_col_offset
                inner = [nested]
            statement.items = statement.items[:1]
            statement.body = inner
