"""Autograd's graph: state carried across iterations, and tensors leaving it for NumPy.

- "Trying to backward through the graph a second time": a value the loop carries from one iteration
  to the next (a recurrent state, a running average) still holds the previous iteration's graph. Each
  carried value that requires grad is detached where the iteration first reads it
  (`hidden = tuple(t.detach() for t in hidden)`), and, failing that, where the iteration starts: the
  failed backward may have freed this iteration's graph too on its way, so the forward pass must be
  built again from before every statement whose graph it went through. A carried tensor is also
  detached where it is read below the last statement that may bind it (`probe(cached[idx])` ->
  `probe(cached.detach()[idx])` under `if cached is None: cached = encoder(x)`): no statement deciding
  whether the value is made runs again. The run resumes at the new
  statement; the re-run rule judges what runs again, and the trial refuses a detach that stops
  training a part of the model (`daifu.core.trained`).
- "modified by an inplace operation": a tensor autograd saved for the backward pass (an activation's
  output, a product's factor) was changed in place afterwards (`h += noise`, `scores.mul_(2)`,
  `h[mask] = 0`). For each tensor such a statement of the interrupted iteration changes, before the
  faulty one, the value is made a copy where it is made (`h = model.encoder(x).clone()`): the change
  then goes to the copy, the saved tensor stays as autograd left it, and the gradient is the same
  (a copy's gradient is the identity). The run resumes at that statement, so the forward pass from
  there is made again; the re-run rule judges what that runs a second time. When the tensor changed in
  place is a weight an optimizer's step updated (`opt_d.step()` between `d_fake = disc(fake)` and the
  generator's `loss_g = bce(d_fake, ones)`), each value made by a call before the step and read after it
  is made again where it is read (`bce(disc(fake), ones)`), with the new weights.
- "Can't call numpy() on Tensor that requires grad" / "can't convert cuda:0 device type tensor to
  numpy": `.detach()` (and `.cpu()`) before the conversion, on each tensor of the statement that needs it;
  and, as an action, the tensor rebound detached before the statement runs again, when nothing after the
  statement reads it (the statement itself may hold calls that code from a bot may not make unattended,
  and a rebinding is the smaller edit). Only for a tensor the statement's block assigns before it, and that
  nothing after it reads: the rebinding then changes nothing but this statement.
- "grad can be implicitly created only for scalar outputs": `backward()` on a tensor of many elements (a
  loss per sample): reduced with `.mean()`, a loss's usual reduction, where it is computed (a line up, so
  what later reads the loss sees the scalar too), or, failing that, where `backward` is called.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Iterator

from repairbot.generate import edits, infer, make, trace
from repairbot.generate.candidate import GeneratedRepair
from repairbot.generate.view import View
from repairbot.names import bound_names

FAMILY = "graph"
_SECOND_BACKWARD = re.compile(
    r"backward through the graph a second time|saved tensors after they have already been freed",
    re.IGNORECASE,
)
_NUMPY_GRAD = re.compile(r"numpy\(\) on Tensor that requires grad|Use tensor\.detach\(\)\.numpy\(\)", re.IGNORECASE)
_NUMPY_DEVICE = re.compile(r"can't convert (cuda|mps|xpu)\S* device type tensor to numpy", re.IGNORECASE)
_NOT_SCALAR = re.compile(r"grad can be implicitly created only for scalar outputs", re.IGNORECASE)
_CHANGED_SAVED = re.compile(r"modified by an inplace operation", re.IGNORECASE)


def propose(view: View) -> Iterator[GeneratedRepair | None]:
    if view.statement is None:
        return
    if view.says(_SECOND_BACKWARD):
        yield from _carried(view)
    if view.says(_CHANGED_SAVED):
        yield from _copied_where_made(view)
        yield from _made_again_after_step(view)
    device = view.says(_NUMPY_DEVICE)
    if view.says(_NUMPY_GRAD) or device:
        yield from _to_numpy(view, ".detach().cpu()" if device else ".detach()")
    if view.says(_NOT_SCALAR):
        yield from _reduced(view)


def _reduced(view: View) -> Iterator[GeneratedRepair | None]:
    """`.mean()` on what `backward()` is called on, where it is computed, then at the call."""
    for call in make.calls(view):
        if not (isinstance(call.func, ast.Attribute) and call.func.attr == "backward") or call.args or any(
                k.arg in ("gradient", None) for k in call.keywords):
            continue
        receiver = call.func.value
        shape = infer.shape(view, receiver)
        if shape is not None and math.prod(shape) == 1:
            continue
        said = f"`{edits.text(view, receiver)}`" + (f" has shape {tuple(shape)}" if shape else " is not a scalar")
        values = _computed(view, receiver.id) if isinstance(receiver, ast.Name) else []
        if values:
            yield make.changed(view, edits.replace(view, [(v, edits.atom(view, v) + ".mean()") for v in values]),
                               f"{said}; `backward()` needs a scalar: reduce it with `.mean()` where it is computed"
                               + (" (in each branch)" if len(values) > 1 else "") + ".", FAMILY, 2)
        yield make.changed(view, make.wrap_node(view, receiver, "{a}.mean()"),
                           f"{said}; `backward()` needs a scalar: call it on the mean.", FAMILY, 1)


def _carried(view: View) -> Iterator[GeneratedRepair | None]:
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
        said = f"`{name}` is carried from one iteration to the next with the previous iteration's autograd graph; "
        yield make.changed(view, edits.insert_before(view, first, line),
                           said + "detach it where the iteration starts using it, so backward stays within this "
                           "iteration.", FAMILY, 2)
        top = view.loops()[0].body[0]
        if top is not first:
            yield make.changed(view, edits.insert_before(view, top, line),
                               said + "detach it where the iteration starts, and make its forward pass again (the "
                               "failed backward freed what it went through).", FAMILY, 1)
        if view.is_tensor(name):
            yield make.changed(view, _detached_reads(view, name),
                               said + "detach it where this iteration's computation reads it, below the last "
                               "statement that may bind it (that one does not run again).", FAMILY, 1)


def _detached_reads(view: View, name: str) -> str | None:
    """The source with each read of `name` written `name.detach()` in the statements of the faulty statement's
    block (itself included) after the last one that may bind `name`: a `.detach()` that re-runs no statement
    deciding whether the value is made (`if cached is None: cached = encoder(x)`)."""
    found = view.block()
    if found is None:
        return None
    statements, index = found
    binders = [i for i, node in enumerate(statements[: index + 1]) if name in bound_names(node)]
    start = binders[-1] + 1 if binders else 0
    reads = [n for node in statements[start : index + 1] for n in ast.walk(node)
             if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]
    return edits.replace(view, [(n, f"{name}.detach()") for n in reads]) if reads else None


def _copied_where_made(view: View) -> Iterator[GeneratedRepair | None]:
    """`.clone()` where each tensor changed in place before the faulty statement, in its iteration, was made."""
    statement, loop = view.statement, trace.interrupted_loop(view)
    if statement is None or loop is None:
        return
    done: set[int] = set()
    for node in (n for s in loop.body for n in ast.walk(s) if isinstance(n, ast.stmt)):
        name = _changed_in_place(node)
        if name is None or node.lineno >= statement.lineno or not (
                view.is_tensor(name) and view.facts(name).get("requires_grad")):
            continue
        link = trace.definition(view, name, node)
        if link is None or link.kind != "assign" or link.value is None or not link.reruns or id(link.value) in done:
            continue
        done.add(id(link.value))
        yield make.changed(view, make.wrap_node(view, link.value, "{a}.clone()"),
                           f"`{name}` is changed in place (line {node.lineno - 1 + view.site.first_lineno}) after "
                           "autograd saved it for the backward pass: make it a copy where it is made, so the change "
                           "goes to the copy; the forward pass is made again from there.", FAMILY, 1)


def _made_again_after_step(view: View) -> Iterator[GeneratedRepair | None]:
    """Each tensor made by a call before an optimizer's step in the interrupted iteration, and read after the
    step up to the faulty statement, made again by the same call where it is read: with the weights the step
    changed in place, whose old values autograd saved for it."""
    statement, loop = view.statement, trace.interrupted_loop(view)
    if statement is None or loop is None:
        return
    inner = [n for s in loop.body for n in ast.walk(s) if isinstance(n, ast.stmt)]
    steps = [n.lineno for n in inner if _optimizer_step(view, n) and n.lineno < statement.lineno]
    if not steps:
        return
    changes: list[tuple[ast.AST, str]] = []
    made: list[str] = []
    for node in inner:
        if not steps[-1] < node.lineno <= statement.lineno or isinstance(node, _COMPOUND):
            continue
        for read in (n for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)):
            value = _made_before_step(view, read.id, node, steps[-1])
            if value is not None:
                changes.append((read, edits.atom(view, value)))
                made.append(read.id)
    if changes:
        names = ", ".join(f"`{name}`" for name in dict.fromkeys(made))
        yield make.changed(view, edits.replace(view, changes),
                           f"{names} was made before the optimizer's step changed the weights it was computed "
                           "with, in place; make it again where it is read after the step, with the new weights.",
                           FAMILY, 1)


_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try)


def _optimizer_step(view: View, node: ast.stmt) -> bool:
    """Whether `node` is `opt.step()` on a name the report describes as an optimizer (it has param groups)."""
    call = node.value if isinstance(node, ast.Expr) else None
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "step"
            and isinstance(call.func.value, ast.Name) and "groups" in view.facts(call.func.value.id))


def _made_before_step(view: View, name: str, use: ast.stmt, step_line: int) -> ast.expr | None:
    """The call that made `name` for `use`, when it is a tensor that requires grad, made in the interrupted
    iteration before the step at `step_line`, from names that still hold what they held then."""
    if not (view.is_tensor(name) and view.facts(name).get("requires_grad")):
        return None
    link = trace.definition(view, name, use)
    if link is None or link.kind != "assign" or not link.reruns or not isinstance(link.value, ast.Call) \
            or link.statement.lineno >= step_line:
        return None
    for read in trace.reads(link.value):
        now, then = trace.definition(view, read, use), trace.definition(view, read, link.statement)
        if (now.statement if now else None) is not (then.statement if then else None):
            return None
    return link.value


def _changed_in_place(node: ast.stmt) -> str | None:
    """The name of the tensor `node` changes in place: `h += e`, `h.mul_(e)`, `h[i] = e`."""
    if isinstance(node, ast.AugAssign):
        target: ast.expr = node.target
    elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute) \
            and node.value.func.attr.endswith("_") and not node.value.func.attr.startswith("_"):
        target = node.value.func.value
    elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript):
        target = node.targets[0].value
    else:
        return None
    return target.id if isinstance(target, ast.Name) else None


def _to_numpy(view: View, suffix: str) -> Iterator[GeneratedRepair | None]:
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
    statement = view.statement
    for node in receivers:
        if not isinstance(node, ast.Name) or statement is None:
            continue
        name = node.id
        if not view.is_tensor(name) or not _assigned_before(view, name):
            continue
        if view.fdef is not None and any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
                                         and n.lineno > (statement.end_lineno or statement.lineno)
                                         for n in ast.walk(view.fdef)):
            continue
        yield make.action(view, f"{name} = {name}{suffix}", f"Rebind `{name}` out of the graph, then run the statement "
                          "again (nothing after it reads the tensor).", FAMILY, 1)


def _computed(view: View, name: str) -> list[ast.expr]:
    """The values assigned to `name` by the last statement before the faulty one, in its block, that assigns
    it: one `name = value`, or each such assignment in the branches of an `if` (which ran is not known; the
    mean of a scalar is that scalar). Empty when `name` is assigned another way there."""
    found = view.block()
    if found is None:
        return []
    statements, index = found
    for node in reversed(statements[:index]):
        stores = [t for t in ast.walk(node)
                  if isinstance(t, ast.Name) and t.id == name and isinstance(t.ctx, ast.Store)]
        if not stores:
            continue
        assigns = [a for a in ast.walk(node) if isinstance(a, ast.Assign) and len(a.targets) == 1
                   and isinstance(a.targets[0], ast.Name) and a.targets[0].id == name]
        plain = isinstance(node, (ast.Assign, ast.If)) and len(assigns) == len(stores)
        return [a.value for a in assigns] if plain else []
    return []


def _assigned_before(view: View, name: str) -> bool:
    """Whether a statement before the faulty one, in its block, assigns `name` (each run of the block makes it anew)."""
    found = view.block()
    if found is None:
        return False
    statements, index = found
    return any(name in bound_names(node) for node in statements[:index])
