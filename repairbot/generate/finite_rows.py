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
    made: dict[int, tuple[ast.Assign, int]] = {}
    for name, variable in view.site.variables.items():
        rows = _partly_nonfinite(variable.type, variable.facts)
        if rows is None or not view.assigned_in_iteration(name):
            continue
        link = definition(view, name, view.statement)
        if link is not None and link.reruns and isinstance(link.statement, ast.Assign):
            made.setdefault(id(link.statement), (link.statement, rows))
    if not made:
        return
    statement, rows = min(made.values(), key=lambda found: found[0].lineno)
    names = [n for n in _targets(statement) if view.is_tensor(n) and _rows(view.facts(n)) == rows]
    following = _following(view, statement)
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


def _rows(facts: dict[str, Any]) -> int | None:
    shape = facts.get("shape")
    if isinstance(shape, list) and shape and all(type(size) is int for size in shape):
        return int(shape[0])
    return None


def _targets(statement: ast.Assign) -> list[str]:
    """The names `statement` binds, in the order written (`xb, yb = ...`: `xb`, `yb`)."""
    found: list[str] = []
    for target in statement.targets:
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
