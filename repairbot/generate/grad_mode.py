"""Gradient tracking left off: turned on again where the iteration starts, and its forward pass made again.

"element 0 of tensors does not require grad and does not have a grad_fn": `backward()` on a tensor that
autograd never recorded. When the report says tracking was off in the crashed thread
(`Environment.grad_enabled`) — an evaluation called `torch.set_grad_enabled(False)` and never turned it
back on, or a `no_grad` context was entered and not left — the loss was made without a graph, and no edit
of the faulty statement can give it one. `torch.set_grad_enabled(True)` in the interrupted
loop's body (after `import torch` where the function does not reach torch), before its first statement that
calls a model, turns tracking on at every iteration, whatever ran at the end of the one before; the run
resumes there, so this iteration's forward pass and loss are made again with a graph, and the batch drawn
above is kept (the re-run rule judges what runs a second time, and the trial that the model still trains).

With tracking on the same message has other causes (a detached value, frozen parameters) that this family
does not read: it proposes nothing then.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from repairbot.generate import edits, make, trace
from repairbot.generate.candidate import GeneratedRepair
from repairbot.generate.view import View

FAMILY = "grad_mode"
_NO_GRAPH = re.compile(r"does not require grad and does not have a grad_fn", re.IGNORECASE)


def propose(view: View) -> Iterator[GeneratedRepair | None]:
    if view.statement is None or not view.says(_NO_GRAPH) or view.report.environment.grad_enabled is not False:
        return
    loop = trace.interrupted_loop(view)
    if loop is None:
        return
    line = "torch.set_grad_enabled(True)"
    if not view.uses_module("torch"):
        if "torch" in view.source_names or view.variable("torch") is not None:
            return  # `torch` is the function's own name for something else
        line = "import torch\n" + line
    yield make.changed(view, edits.insert_before(view, _forward(view, loop), line),
                       "Gradient tracking was off when the crash came (something earlier turned it off and did not "
                       "turn it back on), so the loss has no graph: turn it on where each iteration starts, and make "
                       "this iteration's forward pass again.", FAMILY, 2)


def _forward(view: View, loop: ast.For | ast.AsyncFor | ast.While) -> ast.stmt:
    """The first statement of the loop's body, up to the one holding the faulty statement, that calls a model the
    report names (`model(x)`, `model.encoder(x)`): where the graph starts; the loop's first statement without one
    (what comes before, a batch drawn, does not run again)."""
    for node in loop.body:
        calls = [c.func for c in ast.walk(node) if isinstance(c, ast.Call)]
        roots = [f.value if isinstance(f, ast.Attribute) else f for f in calls]
        if any(isinstance(r, ast.Name) and view.is_module(r.id) for r in roots):
            return node
        if view.statement is not None and trace.inside(view, view.statement, node):
            break
    return loop.body[0]
