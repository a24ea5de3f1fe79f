"""Which names a piece of code binds: the one reading of it that the runtime and the deciders share.

The runtime asks it of a faulty statement (the locals whose change is not progress), the verification
stage of a repair's code (does it rebind the model?), the watch after a repair of an action (what it
may have changed). Each wants a different scope, so the question has two switches, not several copies.
"""

from __future__ import annotations

import ast

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def bound_names(node: ast.AST, *, nested: bool = False, imports: bool = True) -> set[str]:
    """The names `node` and the code inside it assign or delete, and with `imports` import.

    nested: also those bound inside the functions, classes and lambdas it defines (in their own
    scopes); without it, only what it binds where it runs (a comprehension's variable counts: it is
    read as bound, which is the cautious side for every caller).
    """
    names: set[str] = set()
    todo: list[ast.AST] = [node]
    while todo:
        current = todo.pop()
        if isinstance(current, ast.Name) and isinstance(current.ctx, (ast.Store, ast.Del)):
            names.add(current.id)
        elif imports and isinstance(current, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in current.names)
        todo.extend(child for child in ast.iter_child_nodes(current) if nested or not isinstance(child, _SCOPES))
    return names
