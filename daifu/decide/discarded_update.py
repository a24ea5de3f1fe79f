"""An in-place update a repair points at a fresh copy: the statement then does nothing, silently.

A dtype error on an in-place update (`target.mul_(0.9)` on integer targets: "result type Float can't be
cast to the desired output type Long") invites the cast where the statement reads the tensor:
`target.float().mul_(0.9)`. That runs, trains and passes any trial — the copy `.float()` made is updated
and thrown away, and `target` keeps its old values: the smoothing, the decay or the clamp the statement
was there for never happens again. No loss or health check sees it, so it is caught by what the code
is: an expression statement whose in-place method (torch's trailing `_`) updates the result of a
method that makes a new tensor (a cast, a move, a copy), whose result nothing binds.
A person may still choose it; automatic mode does not apply it (`daifu.decide.allowlist`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

COPYING = frozenset({"float", "double", "half", "bfloat16", "long", "int", "short", "char", "byte", "bool",
                     "to", "type", "clone", "cpu", "cuda", "contiguous", "numpy", "tolist", "copy"})
"""Methods whose result is (or, for the cast a repair adds, is then) a new object, not a view of the old."""


def discarded_updates(statements: Iterable[ast.stmt], first_lineno: int | None = None) -> tuple[str, ...]:
    """Why each of `statements` (and the statements inside them) whose in-place update lands on a fresh
    copy does nothing (module docstring); `()` when none does."""
    reasons = []
    for statement in statements:
        for node in ast.walk(statement):
            if not isinstance(node, ast.Expr):
                continue
            copy = _updated_copy(node.value)
            if copy is not None:
                line = f"line {first_lineno + node.lineno - 1}: " if first_lineno is not None else ""
                reasons.append(f"{line}`{ast.unparse(node.value)}` updates in place the new tensor "
                               f"`.{copy}()` made, and nothing keeps it: the statement does nothing")
    return tuple(dict.fromkeys(reasons))


def _updated_copy(value: ast.expr) -> str | None:
    """The copying method whose result the in-place calls of `value` update, when `value` is such a chain
    (`t.float().mul_(a).add_(b)`: `float`)."""
    node = value
    updated = False
    while (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
           and node.func.attr.endswith("_") and not node.func.attr.startswith("_")):
        updated, node = True, node.func.value
    if (updated and isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in COPYING):
        return node.func.attr
    return None
