"""Autograd's graph: state carried across iterations, and tensors leaving it for NumPy.

- "Trying to backward through the graph a second time": a value the loop carries from one iteration
  to the next (a recurrent state, a running average) still holds the previous iteration's graph. Each
  carried value that requires grad is detached where the iteration first reads it
  (`hidden = tuple(t.detach() for t in hidden)`); the run resumes there, so the forward pass is built
  again without the old graph.
- "Can't call numpy() on Tensor that requires grad" / "can't convert cuda:0 device type tensor to
  numpy": `.detach()` (and `.cpu()`) before the conversion, on each tensor of the statement that needs it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from repairbot.generate import edits, make
from repairbot.generate.candidate import Candidate
from repairbot.generate.view import View

FAMILY = "graph"
_SECOND_BACKWARD = r"backward through the graph a second time|saved tensors after they have already been freed"
_NUMPY_GRAD = r"numpy\(\) on Tensor that requires grad|Use tensor\.detach\(\)\.numpy\(\)"
_NUMPY_DEVICE = r"can't convert (cuda|mps|xpu)\S* device type tensor to numpy"


def propose(view: View) -> Iterator[Candidate | None]:
    if view.statement is None:
        return
    if view.says(_SECOND_BACKWARD):
        yield from _carried(view)
    device = view.says(_NUMPY_DEVICE)
    if view.says(_NUMPY_GRAD) or device:
        yield from _to_numpy(view, ".detach().cpu()" if device else ".detach()")


def _carried(view: View) -> Iterator[Candidate | None]:
    for name in view.carried():
        facts = view.facts(name)
        items = facts.get("items") if isinstance(facts.get("items"), list) else None
        if view.is_tensor(name):
            if not facts.get("requires_grad"):
                continue
            line = f"{name} = {name}.detach()"
        elif items and all(isinstance(i, dict) and i.get("type") == "Tensor" for i in items):
            if not any(i.get("requires_grad") for i in items):
                continue
            item = view.fresh("t")
            line = f"{name} = tuple({item}.detach() for {item} in {name})"
        else:
            continue
        first = view.first_read(name)
        if first is None:
            continue
        yield make.changed(view, edits.insert_before(view, first, line),
                           f"`{name}` is carried from one iteration to the next with the previous iteration's "
                           "autograd graph; detach it where the iteration starts using it, so backward stays "
                           "within this iteration.", FAMILY, 2)


def _to_numpy(view: View, suffix: str) -> Iterator[Candidate | None]:
    receivers = [
        n.func.value for n in view.walk()
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "numpy"
    ]
    if receivers:
        changes = [(node, edits.atom(view, node) + suffix) for node in receivers]
        yield make.changed(view, edits.replace(view, changes),
                           f"Take the tensor out of the graph{' and to the CPU' if 'cpu' in suffix else ''} "
                           "before converting it to NumPy.", FAMILY, 2)
    for name in view.reads:
        if view.is_tensor(name) and (view.facts(name).get("requires_grad") or "cpu" in suffix):
            yield make.changed(view, make.wrap_reads(view, name, "{}" + suffix),
                               f"`{name}` is still part of the autograd graph: use `{name}{suffix}` here.", FAMILY, 1)
