"""An index drawn with an inclusive upper bound one past the end: the bound made the last position.

Python's `random.randint(a, b)` includes `b` (NumPy's and torch's `randint` do not): `items[rng.randint(0,
len(items))]` fails, now and then, with "list index out of range" — once in `len(items) + 1` draws, so
the crash comes late and looks like bad luck. What the statement meant is a position of `items`:
`randint(0, len(items) - 1)`, the draw `randrange(len(items))` makes.

The fault is read from the faulty statement and its live values, not from the message: a subscript
whose index is (or is a name bound just above to) a call of `randint` on Python's `random` (the module, a `random.Random(...)` made in the
statement, or a local holding one) whose upper bound is the length of the sequence subscripted — written
as `len(items)`, or evaluated by the report to the same number as `len(items)`. The candidate lowers that
bound by one; the draw for every other index is the one it was (`randint(a, b)` is `randrange(a, b + 1)`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from repairbot.generate import edits, make
from repairbot.generate.candidate import GeneratedRepair
from repairbot.generate.trace import definition
from repairbot.generate.view import View

FAMILY = "api_misuse"
_INDEX_ERRORS = frozenset({"IndexError"})


def propose(view: View) -> Iterator[GeneratedRepair | None]:
    if view.statement is None or not view.exception_types & _INDEX_ERRORS:
        return
    for node in view.walk():
        if not isinstance(node, ast.Subscript) or not isinstance(node.ctx, ast.Load):
            continue
        draw = _drawn(view, node.slice)
        if draw is None:
            continue
        upper, sequence = draw.args[1], edits.text(view, node.value)
        if not _length_of(view, upper, node.value):
            continue
        bound = edits.text(view, upper)
        yield make.changed(view, edits.replace(view, [(upper, f"{bound} - 1")]),
                           f"`randint` of Python's `random` includes its upper bound: `{bound}` is one past the end "
                           f"of `{sequence}`. Draw a position of it, `randint({edits.text(view, draw.args[0])}, "
                           f"{bound} - 1)`; every other draw is as before.", FAMILY, 2)


def _drawn(view: View, index: ast.expr) -> ast.Call | None:
    """The `randint` call of Python's `random` the index is: the index itself, or the value a name was
    bound to just for it (`choice = rng.randint(0, len(items))`, followed by its def-use chain to an
    assignment that resuming the run executes again)."""
    if isinstance(index, ast.Name) and view.statement is not None:
        link = definition(view, index.id, view.statement)
        if link is None or link.kind != "assign" or not link.reruns or link.value is None:
            return None
        index = link.value
    if isinstance(index, ast.Call) and isinstance(index.func, ast.Attribute) and index.func.attr == "randint" \
            and len(index.args) == 2 and not index.keywords and _python_random(view, index.func.value):
        return index
    return None


def _python_random(view: View, node: ast.expr) -> bool:
    """Whether `node` is Python's `random` module (as the name `random`), a `random.Random(...)` made here,
    or a local the report says holds a `random.Random`."""
    if isinstance(node, ast.Name):
        return (node.id == "random" and node.id not in view.site.variables) or view.type_of(node.id) == "random.Random"
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "Random"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "random"
            and "random" not in view.site.variables)


def _length_of(view: View, upper: ast.expr, sequence: ast.expr) -> bool:
    """Whether `upper` is the length of `sequence`: written `len(sequence)`, or evaluated by the report to
    the length the report gives `sequence`."""
    written = edits.text(view, sequence).strip()
    if isinstance(upper, ast.Call) and isinstance(upper.func, ast.Name) and upper.func.id == "len" \
            and len(upper.args) == 1 and edits.text(view, upper.args[0]).strip() == written:
        return True
    facts = {operand.expression.strip(): operand.facts for operand in view.report.operands
             if operand.function == view.site.qualname}
    value, length = facts.get(edits.text(view, upper).strip(), {}).get("value"), facts.get(written, {}).get("len")
    return type(value) is int and value == length
