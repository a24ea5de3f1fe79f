"""Out of memory in training: the iteration's forward, loss and backward run on micro-batches.

Chunking the call that ran out of memory (`memory`) bounds the forward pass's peak, not the activations
autograd keeps for the backward pass — which is what runs out in training. Gradient accumulation
bounds both: the statements from the forward call to `loss.backward()` run once per micro-batch (a
slice of the rows of every batch tensor they read), each micro-batch's loss scaled by its share of the
batch, so that the gradients summed over the micro-batches are the full batch's (for a loss that is a
mean over the batch, PyTorch's default); the optimizer step after them runs once, as before. What the
iteration reads after the backward pass is there as before: the loss (the scaled sum of the
micro-batches' losses, detached) and the forward call's outputs (the micro-batches' outputs, joined).

The update is the full batch's up to floating-point order — BatchNorm statistics aside (each
micro-batch is normalised by its own), and dropout draws its masks in another order: the explanation
says so. The candidate is proposed for a training iteration only: a `.backward()` after the faulty
statement in its block, no optimizer step between, the batch's rows known. A crash inside the
backward pass may have added part of the gradients already: then only when the iteration zeroes the
gradients between its forward call and its backward pass (`out = model(x); loss = ...;
opt.zero_grad(); loss.backward()`): that `zero_grad` call is hoisted before the micro-batches. The
run resumes at the forward call: what ran before it in the iteration does not run again.

Before the micro-batches, the names the replaced statements bind are set to `None`: the failed
iteration's activations are let go before the first micro-batch needs the room.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from repairbot.generate import edits, infer, make
from repairbot.generate.candidate import GeneratedRepair
from repairbot.generate.view import View, assigned_target
from repairbot.signs import BUSY, OOM, others_hold_more

FAMILY = "accumulate"
PARTS = (2, 4, 8)
_SIMPLE = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)


def propose(view: View) -> Iterator[GeneratedRepair | None]:
    statement = view.statement
    if statement is None or not ("OutOfMemoryError" in view.exception_types or view.says(OOM)):
        return
    if view.says(BUSY) or others_hold_more(view.message) or not view.in_loop():
        return
    found = view.block()
    if found is None:
        return
    block, index = found
    step = _training_step(view, block, index)
    if step is None:
        return
    first, backward, zeroing = step
    batch = _batch(view, block[first:backward + 1])
    if batch is None:
        return
    names, rows = batch
    for parts in PARTS:
        size = -(-rows // parts)
        if size < rows:
            yield _accumulated(view, block, first, backward, zeroing, names, rows, size)


def _training_step(view: View, block: list[ast.stmt], index: int) -> tuple[int, int, list[int]] | None:
    """Where the iteration's training step lies in `block` around the faulty statement at `index`: the
    first statement to run again (the forward call, or the zeroing of the gradients before it), the
    `.backward()` statement, and the zeroing statements among them; `None` when it is not one."""
    backward = next((i for i in range(index, len(block)) if _backward(block[i])), None)
    if backward is None or any(not isinstance(s, _SIMPLE) for s in block[index:backward + 1]):
        return None
    if any(_calls(s, "step") for s in block[index:backward + 1]):
        return None
    first = index
    for i in range(index - 1, -1, -1):
        if not isinstance(block[i], _SIMPLE) or not _module_call(view, block[i]) or _calls(block[i], "zero_grad"):
            break
        first = i
    zeroing = [i for i in range(first, backward + 1) if _calls(block[i], "zero_grad")]
    if index == backward and not zeroing:
        return None  # a backward pass that ran out of memory may have added part of the gradients already
    if not any(_module_call(view, block[i]) for i in range(first, backward)):
        return None
    return first, backward, zeroing


def _backward(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call) and \
        isinstance(statement.value.func, ast.Attribute) and statement.value.func.attr == "backward"


def _calls(statement: ast.stmt, method: str) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == method
               for n in ast.walk(statement))


def _module_call(view: View, statement: ast.stmt) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and view.is_module(n.func.id)
               for n in ast.walk(statement))


def _batch(view: View, statements: list[ast.stmt]) -> tuple[list[str], int] | None:
    """The batch tensors the training step reads before binding them (their rows all the same), and
    their rows; `None` when there is none, they disagree, or one is read other than row by row (sliced,
    its shape or length read): on a micro-batch that would mean something else."""
    bound: set[str] = set()
    found: dict[str, int] = {}
    for statement in statements:
        parents = {id(child): node for node in ast.walk(statement) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(statement):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in bound:
                shape = infer.shape(view, node) if view.is_tensor(node.id) else None
                if not shape or shape[0] < 2 or view.is_module(node.id):
                    continue
                if not _row_by_row(node, parents):
                    return None
                found[node.id] = shape[0]
        bound |= _binds(statement)
    sizes = set(found.values())
    if len(sizes) != 1:
        return None
    return sorted(found), sizes.pop()


_ROW_WISE = frozenset({"to", "float", "double", "half", "bfloat16", "long", "int", "cuda", "cpu", "contiguous"})
"""Methods of a batch tensor that act on each row alone: `x.to(device)` on a micro-batch is its rows'."""


def _row_by_row(node: ast.Name, parents: dict[int, ast.AST]) -> bool:
    """Whether the batch tensor `node` is used as a whole value (an argument, an operand) or through a
    row-wise method: not sliced, not asked its shape or length."""
    parent = parents.get(id(node))
    if isinstance(parent, ast.Subscript) and parent.value is node:
        return False
    if isinstance(parent, ast.Attribute):
        return parent.attr in _ROW_WISE and isinstance(parents.get(id(parent)), ast.Call)
    if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id == "len":
        return False
    return True


def _binds(statement: ast.stmt) -> set[str]:
    if isinstance(statement, ast.Assign):
        return set().union(*(assigned_target(t) for t in statement.targets))
    if isinstance(statement, (ast.AugAssign, ast.AnnAssign)):
        return assigned_target(statement.target)
    return set()


def _accumulated(view: View, block: list[ast.stmt], first: int, backward: int, zeroing: list[int],
                 names: list[str], rows: int, size: int) -> GeneratedRepair | None:
    """The statements from `first` to `backward` replaced by the micro-batch loop of `size` rows."""
    step = block[first:backward + 1]
    losses = _losses(block[backward], step[:-1])
    if not losses or any(_summed(s, losses) for s in step):
        return None
    forward = next(s for s in step if _module_call(view, s) and not _calls(s, "zero_grad"))
    outputs = sorted(_binds(forward) - set(losses))
    start, weight, total = view.fresh("start"), view.fresh("weight"), view.fresh("total")
    micro = {name: view.fresh(f"{name}_part") for name in names}
    parts = {name: view.fresh(f"{name}_parts") for name in outputs}
    bound = sorted(set().union(*(_binds(s) for s in step)))
    head = [edits.text(view, block[i]) for i in zeroing]
    head += [f"{' = '.join(bound)} = None"] if bound else []
    head += [f"{total} = 0.0"] + [f"{parts[name]} = []" for name in outputs]
    loop = [f"for {start} in range(0, {names[0]}.shape[0], {size}):"]
    loop += [f"    {micro[n]} = {n}[{start}:{start} + {size}]" for n in names]
    loop.append(f"    {weight} = {micro[names[0]]}.shape[0] / {names[0]}.shape[0]")
    for i, statement in enumerate(step):
        if first + i in zeroing:
            continue
        changes: list[tuple[ast.AST, str]] = [(node, micro[node.id]) for node in ast.walk(statement)
                   if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in micro]
        if statement is block[backward]:
            changes += [(node, f"({node.id} * {weight})") for node in ast.walk(statement)
                        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in losses]
        loop.append("    " + edits.text_with(view, statement, changes))
    loop.append(f"    {total} = {total} + {losses[0]}.detach() * {weight}")
    loop += [f"    {parts[name]}.append({name}.detach())" for name in outputs]
    tail = [f"{losses[0]} = {total}"] + [f"{name} = torch.cat({parts[name]})" for name in outputs]
    text = "\n".join(head + loop + tail)
    source = edits.replace_statements(view, block[first], block[backward], text)
    if source is not None and outputs and not view.uses_module("torch"):
        source = edits.with_line_before(view, source, block[first], "import torch")
    why = (f"the training step ran out of memory on {rows} rows; run its forward pass, loss and backward pass on "
           f"micro-batches of {size} rows, each loss scaled by its share of the batch, and step once (gradient "
           "accumulation: the same update up to floating-point order for a mean loss; BatchNorm statistics and "
           "dropout masks differ)")
    return make.changed(view, source, why, FAMILY, 3)


def _losses(backward: ast.stmt, before: list[ast.stmt]) -> list[str]:
    """The names the `.backward()` call reads that the training step bound: its loss (one only)."""
    bound = set().union(*(_binds(s) for s in before)) if before else set()
    read = {n.id for n in ast.walk(backward) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    found = sorted(read & bound)
    return found if len(found) == 1 else []


def _summed(statement: ast.stmt, losses: list[str]) -> bool:
    """Whether `statement` binds the loss as a sum over the batch (`reduction="sum"`, `.sum()` last):
    scaled by a share of the batch, its gradient would be wrong."""
    if not (isinstance(statement, ast.Assign) and _binds(statement) & set(losses)):
        return False
    value = statement.value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "sum":
        return True
    return any(isinstance(n, ast.keyword) and n.arg == "reduction" for n in ast.walk(value))
