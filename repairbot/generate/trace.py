"""Def-use chains in the function's own syntax tree: which statement made the value a name holds at the crash.

A bad value is often made a few statements above the statement it crashes: in the same block, in an
enclosing one (the `if` or `with` around the crash), or where the loop took it from its iterable. The
value a name holds when a statement runs was bound by the last statement before it, on the way from
the function's start, that binds the name: searched in the statement's own block, then in each
enclosing block before the statement that holds it, up to a loop's target or the function's
parameters. A binding inside an `if`, a `try` or a nested loop before the use is not followed
(which branch ran is not known): the chain stops there.

Each link says whether resuming the run after a surgery runs it again (`reruns`): the runtime resumes
at the first changed statement in the iteration it interrupted (`daifu.core.surgery.resume_path`), so
an edit of a statement before the interrupted iteration changes the next call, not the value this
run holds.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from repairbot.generate.view import View, assigned_target
from repairbot.names import bound_names

_TRANSPARENT = (ast.With, ast.AsyncWith)
"""Compound statements whose body always runs: a binding in it reaches what follows."""


@dataclass(frozen=True)
class Link:
    """The statement that bound `name` for a later use.

    kind: `assign` (`name = value` alone: `value` is what was bound), `loop` (a `for` target:
    `statement` is the loop), `parameter` (the function's), or `other` (a tuple target, an augmented
    assignment, a binding in a branch): a chain does not go on past it.
    """

    name: str
    statement: ast.stmt
    value: ast.expr | None
    kind: str
    reruns: bool


def definition(view: View, name: str, use: ast.stmt) -> Link | None:
    """The link that bound `name` for `use` (see the module docstring); `None` for a global or a builtin."""
    node: ast.AST = use
    while True:
        found = view.block(node) if isinstance(node, ast.stmt) else None
        if found is not None:
            statements, index = found
            for earlier in reversed(statements[:index]):
                if name in bound_names(earlier):
                    return _link(view, name, earlier)
        parent = view.parent(node)
        if parent is None:
            return None
        if parent is view.fdef:
            return _parameter(view, name)
        if isinstance(parent, (ast.For, ast.AsyncFor)) and node in parent.body and name in assigned_target(parent.target):
            return Link(name, parent, None, "loop", False)
        node = parent


def binding(view: View, name: str, statement: ast.stmt) -> Link:
    """The link of `statement`, which binds `name` (a branch's assignment, found by the caller)."""
    return _link(view, name, statement)


def reads(node: ast.AST) -> list[str]:
    """The names `node` reads, in source order, each once (not inside nested scopes)."""
    found: dict[str, None] = {}
    for child in sorted((n for n in _walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)),
                        key=lambda n: (n.lineno, n.col_offset)):
        found.setdefault(child.id, None)
    return list(found)


def interrupted_loop(view: View) -> ast.For | ast.AsyncFor | ast.While | None:
    """The innermost loop around the faulty statement: its iteration is the one a surgery resumes."""
    loops = view.loops()
    return loops[0] if loops else None


def inside(view: View, node: ast.AST, container: ast.AST) -> bool:
    """Whether `node` is `container` or nested in it."""
    current: ast.AST | None = node
    while current is not None:
        if current is container:
            return True
        current = view.parent(current)
    return False


def slice_of(view: View, names: list[str], use: ast.stmt, limit: int = 16) -> Iterator[Link]:
    """The links that made `names` for `use`, and the links that made what those read, breadth first, each once:
    the statements the value came from. Only links that a resume runs again are followed further."""
    pending = [(name, use) for name in names]
    seen: set[tuple[str, int]] = set()
    while pending and len(seen) < limit:
        name, at = pending.pop(0)
        if (name, id(at)) in seen:
            continue
        seen.add((name, id(at)))
        link = definition(view, name, at)
        if link is None:
            continue
        yield link
        if link.kind == "assign" and link.reruns and link.value is not None:
            pending += [(read, link.statement) for read in reads(link.value)]


def _link(view: View, name: str, statement: ast.stmt) -> Link:
    reruns = _reruns(view, statement)
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
        return Link(name, statement, statement.value, "assign", reruns)
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) and statement.value is not None:
        return Link(name, statement, statement.value, "assign", reruns)
    if isinstance(statement, _TRANSPARENT):
        inner = [s for s in statement.body if name in bound_names(s)]
        if inner:
            return _link(view, name, inner[-1])
    return Link(name, statement, None, "other", reruns)


def _parameter(view: View, name: str) -> Link | None:
    fdef = view.fdef
    if fdef is None:
        return None
    arguments = fdef.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg]
    if any(a is not None and a.arg == name for a in every):
        return Link(name, fdef, None, "parameter", False)
    return None


def _reruns(view: View, statement: ast.stmt) -> bool:
    """Whether a surgery's resume runs `statement` again: it is in the interrupted iteration, or there is no loop."""
    loop = interrupted_loop(view)
    return loop is None or any(inside(view, statement, s) for s in loop.body)


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    yield node
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            yield from _walk(child)
