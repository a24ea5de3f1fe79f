"""The one `.backward()` a repair may call without a person: gradient accumulation over micro-batches.

`.backward()` is not on the allowlist: a backward pass adds into every gradient it reaches, so a
repair running one more, or on another quantity, changes the update silently. Out of memory in
training is answered by running the step's forward pass, loss and backward pass on micro-batches
(`repairbot.generate.accumulate`), which calls it once per micro-batch. That shape is admitted
because its arithmetic can be read from the code: the accumulated gradients are the full batch's
(for a loss that is a mean over the batch) whatever the batch's rows. A call is admitted when

- the running function calls `.backward()` itself, only as `loss.backward()` on a name, and the new
  function calls it as often (each of the program's backward passes replaced, none added beside it);
- it is `(loss * weight).backward()`, no arguments, on the name the running function backprops,
  and the only `.backward()` of a loop `for start in range(0, batch.shape[0], size):` (`size` a
  positive literal, no `else`) whose body is plain statements (no `break`, `continue`, nested
  block): every micro-batch runs it once;
- in that body, before it, `part = batch[start:start + size]`, then `weight = part.shape[0] /
  batch.shape[0]`, and the loss is bound; none of `start`, `batch`, `part`, `weight` is bound
  there otherwise. The weights then sum to one: the micro-batches' rows are the batch's.

Everything else in the loop is held to the allowlist as any other code; the trial then runs it.
"""

from __future__ import annotations

import ast

_PLAIN = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)


def admitted_backwards(old: ast.FunctionDef | ast.AsyncFunctionDef | None,
                       new: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[int]:
    """The `.backward()` calls of `new` (by `id` of their `ast.Call`) that accumulate the gradients of
    the loss `old` backprops over micro-batches (module docstring); empty when there are none."""
    if old is None:
        return frozenset()
    losses = _backpropagated(old)
    if losses is None or len(_backward_calls(new)) != len(_backward_calls(old)):
        return frozenset()
    return frozenset(id(call) for loop in ast.walk(new) if isinstance(loop, ast.For)
                     for call in [_accumulating(loop, losses)] if call is not None)


def _backward_calls(tree: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == "backward"]


def _backpropagated(function: ast.AST) -> frozenset[str] | None:
    """The names the running function calls `.backward()` on (`loss.backward()`), or `None` when it
    calls none, or one otherwise (with arguments, on an expression)."""
    names = [_plain_receiver(call) for call in _backward_calls(function)]
    if not names or any(name is None for name in names):
        return None
    return frozenset(name for name in names if name is not None)


def _plain_receiver(call: ast.Call) -> str | None:
    """`loss` of `loss.backward()` without arguments, else `None`."""
    func = call.func
    if call.args or call.keywords or not isinstance(func, ast.Attribute) or not isinstance(func.value, ast.Name):
        return None
    return func.value.id


def _accumulating(loop: ast.For, losses: frozenset[str]) -> ast.Call | None:
    """The backward call of `loop` when `loop` is the micro-batch loop of the module docstring."""
    header = _micro_batch_header(loop)
    if header is None or loop.orelse or not all(isinstance(s, _PLAIN) for s in loop.body):
        return None
    start, batch, size = header
    calls = _backward_calls(ast.Module(body=loop.body, type_ignores=[]))
    if len(calls) != 1:
        return None
    call = calls[0]
    scaled = _scaled_loss(call)
    if scaled is None or scaled[0] not in losses:
        return None
    loss, weight = scaled
    at = next((i for i, s in enumerate(loop.body) if isinstance(s, ast.Expr) and s.value is call), None)
    if at is None:
        return None
    before = loop.body[:at]
    stores = _stores(loop.body)
    part = _single_binding(before, weight, stores)
    if part is None or not _is_share(part, batch):
        return None
    rows = _single_binding(before, _share_part(part), stores)
    if rows is None or not _is_slice(rows, batch, start, size):
        return None
    if start in stores or batch in stores or not any(loss in _stores([s]) for s in before):
        return None
    return call


def _micro_batch_header(loop: ast.For) -> tuple[str, str, int] | None:
    """`(start, batch, size)` of `for start in range(0, batch.shape[0], size)`, else `None`."""
    it = loop.iter
    if not (isinstance(loop.target, ast.Name) and isinstance(it, ast.Call) and isinstance(it.func, ast.Name)
            and it.func.id == "range" and len(it.args) == 3 and not it.keywords):
        return None
    first, stop, step = it.args
    batch = _rows_of(stop)
    if not (_literal_int(first) == 0 and batch is not None and (_literal_int(step) or 0) > 0):
        return None
    return loop.target.id, batch, _literal_int(step) or 0


def _literal_int(node: ast.expr) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _rows_of(node: ast.expr) -> str | None:
    """`name` of `name.shape[0]`, else `None`."""
    if isinstance(node, ast.Subscript) and _literal_int(node.slice) == 0 and isinstance(node.value, ast.Attribute) \
            and node.value.attr == "shape" and isinstance(node.value.value, ast.Name):
        return node.value.value.id
    return None


def _scaled_loss(call: ast.Call) -> tuple[str, str] | None:
    """`(loss, weight)` of `(loss * weight).backward()` (either order), else `None`."""
    receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
    if call.args or call.keywords or not isinstance(receiver, ast.BinOp) or not isinstance(receiver.op, ast.Mult):
        return None
    left, right = receiver.left, receiver.right
    if not (isinstance(left, ast.Name) and isinstance(right, ast.Name)):
        return None
    return (left.id, right.id) if left.id != right.id else None


def _stores(statements: list[ast.stmt]) -> list[str]:
    """Every name bound in `statements`, once per binding."""
    return [n.id for s in statements for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]


def _single_binding(before: list[ast.stmt], name: str | None, stores: list[str]) -> ast.expr | None:
    """The value of `name = value` among `before`, when that is the loop body's only binding of it."""
    if name is None or stores.count(name) != 1:
        return None
    return next((s.value for s in before if isinstance(s, ast.Assign) and len(s.targets) == 1
                 and isinstance(s.targets[0], ast.Name) and s.targets[0].id == name), None)


def _is_share(value: ast.expr, batch: str) -> bool:
    """Whether `value` is `part.shape[0] / batch.shape[0]`."""
    return isinstance(value, ast.BinOp) and isinstance(value.op, ast.Div) and _rows_of(value.left) is not None \
        and _rows_of(value.right) == batch


def _share_part(value: ast.expr) -> str | None:
    return _rows_of(value.left) if isinstance(value, ast.BinOp) else None


def _is_slice(value: ast.expr, batch: str, start: str, size: int) -> bool:
    """Whether `value` is `batch[start:start + size]`."""
    if not (isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) and value.value.id == batch):
        return False
    cut = value.slice
    if not isinstance(cut, ast.Slice) or cut.step is not None:
        return False
    upper = cut.upper
    return isinstance(cut.lower, ast.Name) and cut.lower.id == start and isinstance(upper, ast.BinOp) \
        and isinstance(upper.op, ast.Add) and isinstance(upper.left, ast.Name) and upper.left.id == start \
        and _literal_int(upper.right) == size
