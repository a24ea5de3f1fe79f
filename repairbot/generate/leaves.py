"""An in-place change of a leaf tensor that requires grad: made outside autograd's graph.

"a leaf Variable that requires grad is being used in an in-place operation" (or "a view of a leaf
Variable"): a weight clipped with `w.clamp_(...)`, a manual step `w -= lr * w.grad`, a weight written
in place `w[0] = 0`. Such a statement changes the parameter itself; it is no step of the computation
to differentiate. It is wrapped in `with torch.no_grad():`, as PyTorch's own optimizers make their
updates; an in-place method can instead be called on the tensor's `.data`. Only a statement whose
result nothing reads (an expression statement, an augmented assignment, an assignment into an
item): one that binds the result to a name may mean that value to carry gradients.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Iterator

from repairbot.generate import edits, make
from repairbot.generate.candidate import GeneratedRepair
from repairbot.generate.view import View

FAMILY = "leaves"
_LEAF_IN_PLACE = re.compile(r"leaf Variable that requires grad is being used in an in-place operation", re.IGNORECASE)


def propose(view: View) -> Iterator[GeneratedRepair | None]:
    statement = view.statement
    if statement is None or not view.says(_LEAF_IN_PLACE) or not _changes_in_place(statement):
        return
    run = _run(view, statement)
    for last in dict.fromkeys([statement, run[-1]]):
        written = textwrap.dedent("".join(view.lines[statement.lineno - 1 : last.end_lineno or last.lineno]))
        wrapped = "with torch.no_grad():\n" + "\n".join("    " + line for line in written.splitlines())
        more = f" (and the {run.index(last)} like it after it)" if last is not statement else ""
        yield make.changed(view, edits.replace_statements(view, statement, last, wrapped),
                           f"The statement{more} changes a tensor that requires grad in place (a parameter, not a "
                           "step of the computation): make the change outside autograd, in `torch.no_grad()`.",
                           FAMILY, 2)
    call = statement.value if isinstance(statement, ast.Expr) else None
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr.endswith("_"):
        receiver = call.func.value
        yield make.changed(view, edits.replace(view, [(receiver, edits.atom(view, receiver) + ".data")]),
                           f"Change `{edits.text(view, receiver)}.data` in place: the same values, outside "
                           "autograd's graph.", FAMILY, 1)


def _changes_in_place(statement: ast.stmt) -> bool:
    """Whether `statement` only changes something in place: its own result is read by nothing."""
    if isinstance(statement, ast.Expr):
        return isinstance(statement.value, ast.Call)
    if isinstance(statement, ast.AugAssign):
        return True
    return isinstance(statement, ast.Assign) and all(isinstance(t, ast.Subscript) for t in statement.targets)


def _run(view: View, statement: ast.stmt) -> list[ast.stmt]:
    """`statement` and the statements right after it in its block that change, in place, a tensor the frame
    holds that requires grad (`w -= lr * w.grad` then `b -= lr * b.grad`): each would raise in turn."""
    found = view.block()
    if found is None:
        return [statement]
    statements, index = found
    run = [statement]
    for node in statements[index + 1 :]:
        if not (_changes_in_place(node) and _leaf_changed(view, node)):
            break
        run.append(node)
    return run


def _leaf_changed(view: View, statement: ast.stmt) -> bool:
    """Whether `statement` changes in place a tensor named in the frame that requires grad (`w.clamp_(...)`,
    `w -= ...`, `w[0] = 0`; not `w.grad.zero_()`, which changes its gradient)."""
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call) and isinstance(
            statement.value.func, ast.Attribute):
        changed: ast.expr | None = statement.value.func.value
    elif isinstance(statement, ast.AugAssign):
        changed = statement.target
    elif isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        changed = statement.targets[0]
    else:
        changed = None
    while isinstance(changed, ast.Subscript):
        changed = changed.value
    return isinstance(changed, ast.Name) and view.is_tensor(changed.id) and bool(
        view.facts(changed.id).get("requires_grad"))
