"""A count made with `/`: whether rounding it down loses items, and the count rounded up.

`range(len(rows) / batch)` refuses the float. `//` and `int(...)` make it an int by dropping the
fraction: where the division leaves a remainder, the items past the last whole batch (a last,
partial batch of validation rows) are never reached, silently, every time the loop runs. The live
value tells: a float with a fraction, counted by `range`, is a count that floor makes smaller. Then
the count rounded up (`-(-a // b)`, which needs no import) is the repair that keeps every item, and
floor is a repair that gives those items up — said, and ranked after the edits that give up nothing.
Where the division is exact (`8.0`), floor loses nothing and stays the simplest repair. Which is
right is then left to the trial: a program that cannot take a partial batch crashes in it.
"""

from __future__ import annotations

import ast
import math

from repairbot.generate import edits
from repairbot.generate.view import View


def loses_remainder(view: View, name: str) -> bool:
    """Whether `name`, a float with a fraction, is a count the faulty statement's `range(...)` takes."""
    value = view.facts(name).get("value")
    if not isinstance(value, float) or not math.isfinite(value) or value == int(value):
        return False
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range"
               and any(isinstance(arg, ast.Name) and arg.id == name for arg in node.args)
               for node in view.walk())


def ceiling(view: View, division: ast.BinOp) -> str | None:
    """The function's source with `a / b` written as `-(-a // b)`: the quotient rounded up, an int for ints."""
    left, right = _operand(view, division.left), _operand(view, division.right)
    return edits.replace(view, [(division, f"-(-{left} // {right})")])


def _operand(view: View, node: ast.expr) -> str:
    """The text of `node`, in parentheses unless it binds tighter than a unary minus and `//`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and node.value >= 0:
        return edits.text(view, node)
    return edits.atom(view, node)
