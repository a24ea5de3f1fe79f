"""Rows holding NaN or Inf left out of the batch where it is made, not the whole batch passed over.

A value read as NaN (a missing reading a CSV export wrote as `?`) makes the loss of its batch NaN; the
statement that fails — a finiteness guard's `raise`, a loss, an optimizer step — only reveals it. The
report's facts of the frame's tensors say which of this iteration's tensors hold NaN or Inf in some of
their values but not all: the batch. Following the def-use chain (`repairbot.generate.trace`) back to
the first statement of the interrupted iteration that made such a tensor, this family leaves the rows
holding a non-finite value out of every tensor that statement binds with as many rows, just after it:

    xb, yb = x_all[first:first + BATCH], y_all[first:first + BATCH]
    _daifu_finite = torch.isfinite(xb).reshape(len(xb), -1).all(1) & torch.isfinite(yb).reshape(len(yb), -1).all(1)
    xb, yb = xb[_daifu_finite], yb[_daifu_finite]

A batch a `for` header binds (`for xb, yb in loader:`, a record that failed to decode in it; two
dimensions or more, so that the first is the batch's) loses its rows the same way, at the top of the
loop's body. Replacing such values by 0 (`control`) would train
on a record made up of zeros, with its label, in every epoch that loads it.

In the loop, it holds for every later batch holding such rows; the account counts the rows it drops each
time, and the horizon refuses it where it drops rows from batch after batch. It ranks with rows of a
batch: before skipping the iteration.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterator
from typing import Any

from repairbot.generate import edits, make
from repairbot.generate.candidate import CUTS_ROWS, GeneratedRepair
from repairbot.generate.trace import definition
from repairbot.generate.view import View

FAMILY = "exceptional_data"


def propose(view: View) -> Iterator[GeneratedRepair | None]:
    if not view.outermost or view.statement is None or not view.in_loop() or not view.uses_module("torch"):
        return
    made: dict[int, tuple[ast.Assign | ast.For, int]] = {}
    for name, variable in view.site.variables.items():
        rows = _partly_nonfinite(variable.type, variable.facts)
        if rows is None or not view.assigned_in_iteration(name):
            continue
        link = definition(view, name, view.statement)
        if link is None:
            continue
        statement = link.statement
        if (isinstance(statement, ast.Assign) and link.reruns
                or isinstance(statement, ast.For) and _batch_of_a_loop(link.kind, variable.facts)):
            made.setdefault(id(statement), (statement, rows))
    if not made:
        return
    statement, rows = min(made.values(), key=lambda found: found[0].lineno)
    names = [n for n in _targets(statement) if view.is_tensor(n) and _rows(view.facts(n)) == rows]
    following = statement.body[0] if isinstance(statement, ast.For) else _following(view, statement)
    if not names or following is None:
        return
    keep = view.fresh("_daifu_finite")
    test = " & ".join(f"torch.isfinite({n}).reshape(len({n}), -1).all(1)" for n in names)
    lines = f"{keep} = {test}\n{', '.join(names)} = {', '.join(f'{n}[{keep}]' for n in names)}"
    shown = ", ".join(f"`{n}`" for n in names)
    yield make.changed(view, edits.insert_before(view, following, lines),
                       f"{shown} hold NaN or Inf in some rows of this batch: leave those rows out where the batch "
                       f"is made (line {statement.lineno - 1 + view.site.first_lineno}), for this batch and every "
                       "later one, then go on.", FAMILY, 2, gives_up=CUTS_ROWS)


def _partly_nonfinite(kind: str, facts: dict[str, Any]) -> int | None:
    """The rows of a tensor that holds NaN or Inf in some of its values but not in all; else `None`."""
    rows = _rows(facts)
    bad = (facts.get("nan") or 0) + (facts.get("inf") or 0)
    if kind != "Tensor" or rows is None or rows < 2 or not isinstance(bad, int) or bad <= 0:
        return None
    if bad >= math.prod(facts["shape"]):
        return None  # nothing finite to keep
    return rows


def _batch_of_a_loop(kind: str, facts: dict[str, Any]) -> bool:
    """Whether the `for` header that binds the tensor binds it as a batch of rows: it has two dimensions or
    more (a 1-D tensor a loop yields may be one sample's values, whose first dimension is no batch)."""
    return kind == "loop" and len(facts.get("shape") or []) >= 2


def _rows(facts: dict[str, Any]) -> int | None:
    shape = facts.get("shape")
    if isinstance(shape, list) and shape and all(type(size) is int for size in shape):
        return int(shape[0])
    return None


def _targets(statement: ast.Assign | ast.For) -> list[str]:
    """The names `statement` binds, in the order written (`xb, yb = ...`, `for xb, yb in ...`: `xb`, `yb`)."""
    found: list[str] = []
    for target in statement.targets if isinstance(statement, ast.Assign) else [statement.target]:
        for node in ast.walk(target):
            if isinstance(node, ast.Name) and node.id not in found:
                found.append(node.id)
    return found


def _following(view: View, statement: ast.stmt) -> ast.stmt | None:
    """The statement after `statement` in its block: where the new lines go."""
    found = view.block(statement)
    if found is None:
        return None
    statements, index = found
    return statements[index + 1] if index + 1 < len(statements) else None
