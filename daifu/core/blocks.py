"""Statement paths: where a statement sits in the nested blocks of a function.

A path is a tuple alternating block positions and field names, from the function body down:
`(3, "body", 0, "handlers.1", 2)` is statement 2 of the second `except` of the `try` that is
statement 0 of the body of statement 3. Paths name statements independently of code objects, so
a crash in the fast path and one in a continuation of the same version share a site.
"""

from __future__ import annotations

import ast

Path = tuple  # alternating int, str, ..., int

TRY: tuple[type[ast.Try], ...] = (ast.Try, ast.TryStar) if hasattr(ast, "TryStar") else (ast.Try,)  # type: ignore[assignment]
"""`try` statements: `try ... except` and, since Python 3.11, `try ... except*`."""
COMPOUND = (ast.For, ast.While, ast.If, ast.With, ast.Match, *TRY)
HEADER_KINDS = {ast.For: "for", ast.While: "while", ast.If: "if", ast.With: "with", ast.Match: "match"}


def child_blocks(node: ast.stmt) -> list[tuple[str, list[ast.stmt]]]:
    """The statement lists directly inside a compound statement, with their field names (none for
    a simple statement). Dispatched on the node's exact type (`ast` classes are never subclassed):
    every walk over a function's statements asks this of each one."""
    kind = type(node)
    if kind not in _COMPOUND_TYPES:
        return []
    if kind is ast.With:
        return [("body", node.body)]  # type: ignore[attr-defined]
    if kind is ast.Match:
        return [(f"cases.{index}", case.body) for index, case in enumerate(node.cases)]  # type: ignore[attr-defined]
    if kind in TRY:
        handlers = [(f"handlers.{index}", handler.body) for index, handler in enumerate(node.handlers)]  # type: ignore[attr-defined]
        return [("body", node.body), *handlers, ("orelse", node.orelse), ("finalbody", node.finalbody)]  # type: ignore[attr-defined]
    return [("body", node.body), ("orelse", node.orelse)]  # type: ignore[attr-defined]


_COMPOUND_TYPES = frozenset(COMPOUND)
"""The statements `child_blocks` finds blocks in: `for`, `while`, `if`, `with`, `match`, `try`."""


def block_of(node: ast.stmt, field: str) -> list[ast.stmt]:
    """The statement list `field` of compound statement `node`."""
    for name, block in child_blocks(node):
        if name == field:
            return block
    raise KeyError(f"{type(node).__name__} has no block {field!r}")


def annotate(fdef: ast.FunctionDef) -> None:
    """Stamp every statement of the function (not of nested scopes) with its path."""

    def walk(block: list[ast.stmt], prefix: Path) -> None:
        for index, statement in enumerate(block):
            statement._daifu_path = prefix + (index,)  # type: ignore[attr-defined]
            for field, child in child_blocks(statement):
                walk(child, prefix + (index, field))

    walk(fdef.body, ())


def path_of(node: ast.stmt) -> Path:
    """The path stamped by `annotate`."""
    return node._daifu_path  # type: ignore[attr-defined,no-any-return]


def node_at(fdef: ast.FunctionDef, path: Path) -> ast.stmt:
    """The statement at `path`."""
    block: list[ast.stmt] = fdef.body
    for position in range(0, len(path) - 1, 2):
        block = block_of(block[path[position]], path[position + 1])
    return block[path[-1]]


def iteration_start(fdef: ast.FunctionDef, path: Path) -> int:
    """How far back a run interrupted at `path` may resume in the iteration it is running: the
    length of the shortest prefix of `path` that names a block the run reaches from there by
    leaving only `if`, `match` and `with` statements and `try` statements without `finally`.

    The run stops going up at the body of the innermost loop holding it (the interrupted
    iteration; going further would start that loop over), at the function's body, and at a
    `try ... finally`, whose clause would be left unrun. A `with` left that way is exited first
    (`Mode.ABOVE`); an `if` or `match` has nothing to undo.
    """
    top = len(path) - 1
    while top >= 2 and _leavable(node_at(fdef, path[: top - 1])):
        top -= 2
    return top


def _leavable(node: ast.stmt) -> bool:
    return isinstance(node, (ast.If, ast.Match, ast.With)) or (isinstance(node, TRY) and not node.finalbody)


def with_depth(fdef: ast.FunctionDef, path: Path) -> int:
    """How many `with` statements hold the statement at `path`: the depth `D` of the `@cmD` a
    `with` directly inside its block would use."""
    return sum(isinstance(node_at(fdef, path[:end]), ast.With) for end in range(1, len(path) - 1, 2))


def _contains(node: ast.stmt, line: int, col: int | None) -> bool:
    if node.end_lineno is None:
        return False
    if col is None:
        return node.lineno <= line <= node.end_lineno
    return (node.lineno, node.col_offset) <= (line, col) <= (node.end_lineno, node.end_col_offset or 0)


def locate(block: list[ast.stmt], line: int, col: int | None) -> tuple[ast.stmt, bool] | None:
    """The innermost statement holding source position (line, col), and whether it is a header.

    A position inside a compound statement but outside all of its blocks belongs to its header:
    the `for` iteration, an `if`/`while` test, a `with` expression, a `match` subject or pattern.
    """
    for statement in block:
        if not _contains(statement, line, col):
            continue
        for _field, child in child_blocks(statement):
            found = locate(child, line, col)
            if found is not None:
                return found
        return statement, isinstance(statement, COMPOUND)
    return None


def shared_lines(fdef: ast.FunctionDef) -> frozenset[int]:
    """The lines of the function where the code of more than one statement sits, so that only a
    column tells which raised (`a = 1; b = f()`, `for x in xs: use(x)`, a statement beginning where
    another ends). On every other line the line alone locates a crash, and finding a column (a
    walk of the code's position table) is not needed."""
    count: dict[int, int] = {}

    def own(first: int, last: int) -> None:
        for line in range(first, last + 1):
            count[line] = count.get(line, 0) + 1

    def walk(block: list[ast.stmt]) -> None:
        for statement in block:
            if not isinstance(statement, COMPOUND):
                own(statement.lineno, statement.end_lineno or statement.lineno)
                continue
            own(statement.lineno, max((_last_line(part) for part in _header(statement)), default=statement.lineno))
            for clause in [*getattr(statement, "handlers", ()), *getattr(statement, "cases", ())]:
                own(_first_line(clause), max((_last_line(part) for part in _header(clause)), default=_first_line(clause)))
            for _field, child in child_blocks(statement):
                walk(child)

    walk(fdef.body)
    return frozenset(line for line, holders in count.items() if holders > 1)


def _header(node: ast.AST) -> list[ast.AST]:
    """The expressions of a compound statement's header, or of an `except` / `case` clause."""
    if isinstance(node, ast.For):
        return [node.target, node.iter]
    if isinstance(node, (ast.While, ast.If)):
        return [node.test]
    if isinstance(node, ast.With):
        return [part for item in node.items for part in (item.context_expr, item.optional_vars) if part is not None]
    if isinstance(node, ast.Match):
        return [node.subject]
    if isinstance(node, ast.ExceptHandler):
        return [node.type] if node.type is not None else []
    if isinstance(node, ast.match_case):
        return [node.pattern] + ([node.guard] if node.guard is not None else [])
    return []


def _first_line(node: ast.AST) -> int:
    return node.pattern.lineno if isinstance(node, ast.match_case) else node.lineno  # type: ignore[attr-defined,no-any-return]


def _last_line(node: ast.AST) -> int:
    return node.end_lineno or node.lineno  # type: ignore[attr-defined,no-any-return]
