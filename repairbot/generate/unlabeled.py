"""Rows labelled -1, "no label", left out of a classification loss by the loss's own `ignore_index`.

A data set annotated in rounds, or partly, marks the samples nobody labelled with -1; `cross_entropy`
and `nll_loss` refuse the target -1 ("Target -1 is out of bounds"). The convention that reads -1 as "no
label" is the loss's `ignore_index`: the labelled rows train, the others are left out of the loss and of
its mean. The report names the loss's target and its range against the classes of its input
(`daifu.report.operands`); this family adds `ignore_index=-1` to the failing loss call when the live
labels read as that convention and as nothing else:

- an integer target whose smallest value is -1 (so every negative label is -1), and
- whose largest is the last class (`classes - 1`): every class is present, so the labels are not numbered
  one too low (labels shifted down by one run -1..classes-2, and ignoring -1 would silently drop a whole
  class — that is an offset, which `repairbot.generate.origin` proposes where the labels are made).

Nothing else is changed: a loss given as a module (`criterion(out, y)`) is left to the other families.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from repairbot.generate import edits, make
from repairbot.generate.candidate import IGNORES_UNLABELED, GeneratedRepair
from repairbot.generate.view import View

FAMILY = "exceptional_data"
_LOSSES = frozenset({"cross_entropy", "nll_loss"})
_UNLABELED = -1


def propose(view: View) -> Iterator[GeneratedRepair | None]:
    if view.statement is None:
        return
    for operand in view.report.operands:
        classes = operand.expect.get("classes")
        facts = operand.facts
        if operand.function != view.site.qualname or type(classes) is not int or classes < 2:
            continue
        if not str(facts.get("dtype", "")).startswith(("int", "uint")):
            continue
        if facts.get("min") != _UNLABELED or facts.get("max") != classes - 1:
            continue
        for call in make.calls(view):
            target = _target(call)
            if make.name_of(call.func) not in _LOSSES or target is None \
                    or edits.text(view, target).strip() != operand.expression.strip():
                continue
            if any(keyword.arg == "ignore_index" for keyword in call.keywords):
                continue
            written = edits.text(view, target)
            code = edits.replace(view, [(target, f"{written}, ignore_index={_UNLABELED}")])
            yield make.changed(view, code, f"{operand.wrong or 'the target holds -1'}: -1 marks a sample with no "
                               f"label (every class 0..{classes - 1} is present besides it). Leave those rows out "
                               "of the loss by its `ignore_index=-1`; the labelled rows train as before.",
                               FAMILY, 2, gives_up=IGNORES_UNLABELED)


def _target(call: ast.Call) -> ast.expr | None:
    """The loss call's target: its second positional argument, or `target=`; the last argument given
    positionally or by that keyword, so that a keyword can follow it."""
    for keyword in call.keywords:
        if keyword.arg == "target":
            return keyword.value
    return call.args[1] if len(call.args) == 2 else None
