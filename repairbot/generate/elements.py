"""A tensor of many elements where one is needed, and `None` among the tensors to join.

- "a Tensor with N elements cannot be converted to Scalar": `.item()` on a vector. What it is says how
  to make it one number: a comparison or a boolean tensor counts (`.sum()`), a floating tensor is a
  per-element value to average (`.mean()`: a loss per sample, an accuracy per batch), an integer one is
  summed; its first element (`[0]`) is the last guess. Each is tried; the order is the evidence.
- "expected Tensor as element 0 in argument 0, but got NoneType": `torch.cat` (`stack`, ...) of a list
  that starts with a `None` placeholder (a running buffer begun as `[None]`, a previous value that is
  `None` on the first step): the `None` items left out (`[t for t in xs if t is not None]`). Only for a
  `None` first element: one further in stands for a missing item, and dropping it would misalign the rest.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from repairbot.generate import edits, infer, make
from repairbot.generate.candidate import GeneratedRepair
from repairbot.generate.view import View

FAMILY = "elements"
_NOT_SCALAR = re.compile(r"a Tensor with (\d+) elements cannot be converted to Scalar", re.IGNORECASE)
_NONE_ITEM = re.compile(r"expected Tensor as element 0 in argument (\d+), but got NoneType", re.IGNORECASE)
_JOINS = frozenset({"cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack"})
_COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "isfinite", "logical_and",
                          "logical_or", "logical_not"})


def propose(view: View) -> Iterator[GeneratedRepair | None]:
    if view.statement is None:
        return
    if view.says(_NOT_SCALAR):
        yield from _reduced(view)
    found = view.says(_NONE_ITEM)
    if found:
        yield from _without_none(view, int(found.group(1)))


def _reduced(view: View) -> Iterator[GeneratedRepair | None]:
    for call in make.calls(view):
        if not (isinstance(call.func, ast.Attribute) and call.func.attr == "item") or call.args or call.keywords:
            continue
        receiver = call.func.value
        text = edits.text(view, receiver)
        head = edits.text(view, call.func).rsplit(".", 1)[0]  # the receiver as written, in its own parentheses
        for suffix, evidence, why in _reductions(view, receiver):
            yield make.changed(view, edits.replace(view, [(call.func, f"{head}{suffix}.item")]),
                               f"`{text}` has more than one element, and `.item()` needs one: {why}.", FAMILY, evidence)


def _reductions(view: View, receiver: ast.expr) -> list[tuple[str, int, str]]:
    """The reductions to try on `receiver` before `.item()`, each with its evidence, by what the value is."""
    dtype = infer.dtype(view, receiver)
    if _compared(receiver) or dtype == "bool":
        return [(".sum()", 2, "it holds truth values, so count them"),
                (".float().mean()", 0, "it holds truth values: take the fraction that hold")]
    if infer.floating(dtype):
        return [(".mean()", 2, "it holds one value per element (a loss per sample); average them"),
                (".sum()", 1, "add them up"), ("[0]", 0, "take its first element")]
    if dtype is not None:
        return [(".sum()", 1, "it holds integers; add them up"), ("[0]", 0, "take its first element")]
    return [(".mean()", 1, "average its elements"), (".sum()", 0, "add them up"),
            ("[0]", 0, "take its first element")]


def _compared(node: ast.expr) -> bool:
    """Whether `node` is a comparison (`pred == y`, `pred.eq(y)`), possibly cast to numbers (`(pred == y).float()`)."""
    if isinstance(node, ast.Compare):
        return True
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    if node.func.attr in infer.CAST_METHODS.values() and not node.args:
        return _compared(node.func.value)
    return node.func.attr in _COMPARISONS


def _without_none(view: View, argument: int) -> Iterator[GeneratedRepair | None]:
    for call in make.calls(view):
        if make.name_of(call.func) not in _JOINS or len(call.args) <= argument:
            continue
        items = call.args[argument]
        if isinstance(items, ast.Starred):
            continue
        item = view.fresh("t")
        yield make.changed(view, edits.replace(view, [(items, f"[{item} for {item} in {edits.text(view, items)} "
                                                              f"if {item} is not None]")]),
                           f"`{edits.text(view, items)}` starts with `None` (a placeholder, not a tensor): join the "
                           "tensors it holds.", FAMILY, 2)
