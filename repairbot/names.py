"""Which names a piece of code binds: the one reading of it the service's rules, generator and model checks share."""

from __future__ import annotations

import ast

_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_SCOPES = (*_DEFINITIONS, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def bound_names(node: ast.AST, *, nested: bool = False) -> set[str]:
    """The names `node` and the code in it bind: assign or delete, import, define (a `def` or `class`
    inside it), catch (`except ... as`). Parameters are not counted.

    nested: also those bound inside the functions, classes, lambdas and comprehensions it holds, in
    their own scopes (for a `def`: the names its body binds); without it, only those bound in the
    scope `node` runs in (for a `def`: its name).
    """
    found: set[str] = set()
    todo: list[ast.AST] = [node]
    while todo:
        current = todo.pop()
        if isinstance(current, ast.Name) and isinstance(current.ctx, (ast.Store, ast.Del)):
            found.add(current.id)
        elif isinstance(current, (ast.Import, ast.ImportFrom)):
            found.update((alias.asname or alias.name).split(".")[0] for alias in current.names)
        elif isinstance(current, _DEFINITIONS) and (current is not node or not nested):
            found.add(current.name)
        elif isinstance(current, ast.ExceptHandler) and current.name:
            found.add(current.name)
        if not nested and isinstance(current, _SCOPES):
            continue
        todo.extend(ast.iter_child_nodes(current))
    return found
