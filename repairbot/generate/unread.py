"""A value made for the faulty statement and never used: the statement reads what it was made from instead.

`shift_logits = logits[:, :-1, :]` a line up, then `F.cross_entropy(logits.reshape(-1, V), ...)`: the
programmer derived a value to use it, and used its source by mistake. The function never reads the
derived name anywhere, which is the evidence: a store nothing reads is a slip, not a design. For each
name the faulty statement reads, the names bound from it above the crash, in the block of the faulty
statement, once in the whole function and read nowhere in it, are proposed in its place (every read of it
in the statement). Where both shapes are known and equal, the exchange would change nothing the
crash is about: none is proposed. Each candidate is a surgery of the statement only, tried like any other.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from repairbot.generate import edits, infer, make
from repairbot.generate.candidate import GeneratedRepair
from repairbot.generate.view import View

FAMILY = "unread"
_ERRORS = frozenset({"RuntimeError", "ValueError", "IndexError", "TypeError"})


def propose(view: View) -> Iterator[GeneratedRepair | None]:
    statement, fdef = view.statement, view.fdef
    found = view.block()
    if statement is None or fdef is None or found is None or not view.exception_types & _ERRORS:
        return
    block, index = found
    unread = _never_read(fdef)
    for read in view.reads:
        for earlier in block[:index]:
            made = _made_from(earlier, read)
            if made is None or made not in unread or view.variable(made) is None or _same_shape(view, read, made):
                continue
            said = (f"`{made}` was made from `{read}` at line {view.site.first_lineno + earlier.lineno - 1} and is "
                    f"never used; this statement reads `{read}`: use `{made}`.")
            yield make.changed(view, edits.replace(view, [(node, made) for node in view.name_nodes(read)]), said,
                               FAMILY, 2)


def _never_read(fdef: ast.AST) -> set[str]:
    """The names the function binds exactly once, by a plain assignment, and never reads (nor deletes,
    nor declares global): a nested function or lambda reading one counts as a read."""
    stores: dict[str, int] = {}
    read: set[str] = set()
    for node in ast.walk(fdef):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Store):
                stores[node.id] = stores.get(node.id, 0) + 1
            else:
                read.add(node.id)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            read.update(node.names)
    return {name for name, count in stores.items() if count == 1 and name not in read}


def _made_from(statement: ast.stmt, source: str) -> str | None:
    """`name` of `name = <expression reading source>`, else `None`."""
    if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)):
        return None
    reads = {n.id for n in ast.walk(statement.value) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    target = statement.targets[0].id
    return target if source in reads and target != source else None


def _same_shape(view: View, a: str, b: str) -> bool:
    shape_a = infer.shape(view, ast.Name(id=a, ctx=ast.Load()))
    shape_b = infer.shape(view, ast.Name(id=b, ctx=ast.Load()))
    return shape_a is not None and shape_a == shape_b
