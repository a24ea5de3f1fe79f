"""Shape edits derived from the actual shapes of the operands.

The tensors a statement combines are found as pairs — the arguments of one call, the operands of
one arithmetic or comparison — with shapes from the report (`repairbot.generate.infer`). For each
pair whose shapes disagree, the edits that would make them agree are worked out from the numbers:

- the leading dimensions of one flattened to the other's length (`out.flatten(0, -2)`: (20, 10, V)
  against 200 targets), or the other flattened (`y.flatten()`);
- a dimension of size 1 squeezed out, or one added (`unsqueeze`), where that makes the shapes equal
  or broadcastable;
- two dimensions transposed, when that is what differs;
- `reshape_as` for two shapes of as many elements;
- a batch dimension added to an input (`x_val[0].unsqueeze(0)`) that the same callee is elsewhere
  given with one more leading dimension;
- for a matrix product ("mat1 and mat2 shapes cannot be multiplied (AxB and CxD)"): the input's
  trailing dimensions flattened to the layer's C features, or a transpose; an input made by a
  `reshape`/`view` whose tensor has the layer's C features as it stands (its trailing dimensions
  flattened when it has more than two) is given that tensor instead;
- `view` -> `reshape` (or `.contiguous()`) for a tensor whose strides `view` cannot follow;
- for tensors stacked that differ only where one has size 1 ("stack expects each tensor to be equal
  size, but got [3, 32, 32] at entry 0 and [1, 32, 32] at entry 7": a grayscale image among colour
  ones): each element expanded to the common size (`image.expand(3, -1, -1)`);
- for a `view`/`reshape` whose sizes do not multiply out to the tensor's elements ("shape '[128, 1, 28,
  28]' is invalid for input of size 78400"): each size that, left to be inferred (`-1`), makes them
  multiply out — a batch size written as a constant where the last batch is smaller;
- last, the other tensor of a pair cut to match, when it is a buffer the loop carries (made before
  it, at full batch size) and this iteration's tensor is shorter (a last, smaller batch). Cutting
  drops elements, and the candidate says so.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Iterator

from repairbot.generate import edits, infer, make
from repairbot.generate.candidate import DROPS_ELEMENTS, GeneratedRepair
from repairbot.generate.view import View

FAMILY = "shapes"
_SHAPE_TALK = re.compile(
    r"size|shape|dimension|\bdim\b|match|broadcast|mat1|mat2|expected input|batch_size|view|stride|contiguous"
    r"|elements|Expected \d+D|input of",
    re.IGNORECASE,
)
_MATMUL = re.compile(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)", re.IGNORECASE)
_INVALID_SHAPE = re.compile(r"shape '\[([-\d, ]*)\]' is invalid for input of size (\d+)", re.IGNORECASE)
_RESHAPES = {"view", "reshape"}
_STACK = re.compile(
    r"stack expects each tensor to be equal size, but got \[([\d, ]*)\] at entry \d+ and \[([\d, ]*)\] at entry",
    re.IGNORECASE,
)
Shape = list[int]


def propose(view: View) -> Iterator[GeneratedRepair | None]:
    if view.statement is None or not view.exception_types & {"RuntimeError", "ValueError", "IndexError", "TypeError"}:
        return
    if not view.says(_SHAPE_TALK):
        return
    if view.says(r"view size is not compatible|not compatible with input tensor's size and stride"):
        yield from _view_to_reshape(view)
    yield from _matmul(view)
    yield from _inferred_size(view)
    yield from _expanded_entries(view)
    yield from _missing_batch(view)
    for a, b in _pairs(view):
        yield from _pair(view, a, b)
        yield from _pair(view, b, a)


def _pairs(view: View) -> Iterator[tuple[ast.expr, ast.expr]]:
    """Operands combined by one call or operation, both of known shape, each pair once."""
    seen: set[tuple[str, str]] = set()
    for node in view.walk():
        if isinstance(node, ast.Call):
            group = [*node.args, *(k.value for k in node.keywords)]
        elif isinstance(node, ast.BinOp):
            group = [node.left, node.right]
        elif isinstance(node, ast.Compare):
            group = [node.left, *node.comparators]
        else:
            continue
        shaped = [g for g in group if infer.shape(view, g) is not None]
        for i, a in enumerate(shaped):
            for b in shaped[i + 1 :]:
                key = (edits.text(view, a), edits.text(view, b))
                if key not in seen and infer.shape(view, a) != infer.shape(view, b):
                    seen.add(key)
                    yield a, b


def _pair(view: View, a: ast.expr, b: ast.expr) -> Iterator[GeneratedRepair | None]:
    """Edits of `a` that make it agree with `b`."""
    sa, sb = infer.shape(view, a), infer.shape(view, b)
    assert sa is not None and sb is not None
    name_a = edits.text(view, a)
    said = f"`{name_a}` has shape {tuple(sa)} and `{edits.text(view, b)}` {tuple(sb)}"
    if len(sa) >= 3 and len(sb) in (1, 2) and math.prod(sa[:-1]) == sb[0]:
        yield _edit(view, a, "{a}.flatten(0, -2)", f"{said}: flatten all but the last dimension of `{name_a}` so "
                    "its rows line up with the other's.", 2)
    if len(sa) >= 2 and len(sb) == 2 and math.prod(sa) == sb[0]:
        yield _edit(view, a, "{a}.flatten()", f"{said}: flatten `{name_a}` to one row per element of the other.", 2)
    for k, size in enumerate(sa):
        squeezed = sa[:k] + sa[k + 1 :]
        if size == 1 and (squeezed == sb or (len(squeezed) == len(sb) and _broadcasts(squeezed, sb) and sa != sb)):
            yield _edit(view, a, "{a}" + f".squeeze({k})", f"{said}: drop the dimension {k} of size 1 of `{name_a}`.",
                        2 if squeezed == sb else 1)
    if len(sa) < len(sb):
        for k in range(len(sa) + 1):
            grown = sa[:k] + [1] + sa[k:]
            if len(grown) == len(sb) and _broadcasts(grown, sb) and not _broadcasts(sa, sb):
                yield _edit(view, a, "{a}" + f".unsqueeze({k})", f"{said}: add a dimension at {k} to `{name_a}` so "
                            "it broadcasts.", 1)
    if len(sa) == len(sb) >= 2:
        for i in range(len(sa)):
            for j in range(i + 1, len(sa)):
                swapped = list(sa)
                swapped[i], swapped[j] = swapped[j], swapped[i]
                if swapped == sb:
                    template = "{a}.t()" if len(sa) == 2 else "{a}" + f".transpose({i}, {j})"
                    yield _edit(view, a, template, f"{said}: its dimensions {i} and {j} are swapped.", 1)
    if sa and sb and math.prod(sa) == math.prod(sb) and len(sa) != len(sb) and isinstance(b, ast.Name):
        yield _edit(view, a, "{a}" + f".reshape_as({b.id})", f"{said}, as many elements: give `{name_a}` the other's "
                    "shape.", 0)
    yield from _cut(view, a, b, sa, sb)


def _broadcasts(a: Shape, b: Shape) -> bool:
    return all(x == y or x == 1 or y == 1 for x, y in zip(reversed(a), reversed(b)))


def _cut(view: View, a: ast.expr, b: ast.expr, sa: Shape, sb: Shape) -> Iterator[GeneratedRepair | None]:
    """`a[:n]` when `a` is a buffer made before the loop and `b` this iteration's shorter tensor."""
    if not (isinstance(a, ast.Name) and view.in_loop() and not view.assigned_in_iteration(a.id)):
        return
    size_of = _size_expression(view, b)
    if size_of is None or len(sa) != len(sb) or not sa or sa[0] <= sb[0] or sa[1:] != sb[1:]:
        return
    yield _edit(view, a, "{a}" + f"[: {size_of}]", f"`{a.id}` was made before the loop for {sa[0]} rows; this "
                f"iteration has {sb[0]} (a last, smaller batch): use as many of its rows.", 1, DROPS_ELEMENTS)


def _size_expression(view: View, node: ast.expr) -> str | None:
    """Code for the length of `node` that reads only a name of this iteration (`len(y)`)."""
    wanted = infer.shape(view, node)
    if not wanted:
        return None
    for name in [node.id] if isinstance(node, ast.Name) else [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]:
        shape = infer.shape(view, ast.Name(id=name, ctx=ast.Load()))
        if shape and shape[0] == wanted[0] and view.assigned_in_iteration(name):
            return f"len({name})"
    return None


def _edit(view: View, node: ast.expr, template: str, explanation: str, evidence: int,
          gives_up: str = "") -> GeneratedRepair | None:
    return make.changed(view, make.wrap_node(view, node, template), explanation, FAMILY, evidence, gives_up)


def _view_to_reshape(view: View) -> Iterator[GeneratedRepair | None]:
    for node in view.walk():
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "view":
            receiver = node.func.value
            yield make.changed(view, edits.replace_between(view, receiver, node.args[0] if node.args else node,
                                                           ".view", ".reshape") if node.args else None,
                               "`view` cannot follow this tensor's strides; `reshape` copies when it must.", FAMILY, 2)
            yield make.changed(view, make.wrap_node(view, receiver, "{a}.contiguous()"),
                               "Make the tensor contiguous before `view`.", FAMILY, 1)


def _matmul(view: View) -> Iterator[GeneratedRepair | None]:
    found = view.says(_MATMUL)
    if not found:
        return
    _, b, c, d = (int(x) for x in found.groups())
    inputs = [arg for call in make.calls(view) for arg in call.args[:1]]
    inputs += [n.left for n in view.walk() if isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult)]
    for node in inputs:
        shape = infer.shape(view, node)
        if not shape:
            continue
        if len(shape) > 2 and math.prod(shape[1:]) == c:
            yield _edit(view, node, "{a}.flatten(1)", f"`{edits.text(view, node)}` has shape {tuple(shape)}; the "
                        f"layer takes {c} features: flatten all but the batch dimension.", 2)
        if len(shape) >= 2 and shape[-2] == c and shape[-1] == b:
            yield _edit(view, node, "{a}.transpose(-2, -1)", f"`{edits.text(view, node)}` has its last two "
                        f"dimensions swapped ({tuple(shape)}; {c} features wanted).", 1)
        yield from _unreshaped(view, node, c)
    for product in view.walk():
        if isinstance(product, ast.BinOp) and isinstance(product.op, ast.MatMult):
            right = infer.shape(view, product.right)
            if right and len(right) >= 2 and right[-1] == b and right[-2] == d:
                yield _edit(view, product.right, "{a}.transpose(-2, -1)", "The right operand of `@` is transposed.", 1)


def _unreshaped(view: View, node: ast.expr, features: int) -> Iterator[GeneratedRepair | None]:
    """The tensor a `reshape`/`view` input was made from, in its place, when it fits a layer of `features`
    inputs as it stands (one row per sample, or its trailing dimensions flattened): the reshape broke it."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _RESHAPES):
        return
    tensor = node.func.value
    shape = infer.shape(view, tensor)
    if not shape or len(shape) < 2 or math.prod(shape[1:]) != features:
        return
    written = edits.text(view, tensor) if len(shape) == 2 else f"{edits.atom(view, tensor)}.flatten(1)"
    said = (f"`{edits.text(view, node)}` gives the layer rows of the wrong width; `{edits.text(view, tensor)}` "
            f"({tuple(shape)}) has its {features} features as it stands: give it that tensor.")
    yield make.changed(view, edits.replace(view, [(node, written)]), said, FAMILY, 2)


def _missing_batch(view: View) -> Iterator[GeneratedRepair | None]:
    """An input with one dimension fewer than what the same callee gets elsewhere: add the batch dimension."""
    fdef = view.fdef
    if fdef is None:
        return
    for call in make.calls(view):
        if not call.args:
            continue
        callee = edits.text(view, call.func)
        shape = infer.shape(view, call.args[0])
        if shape is None:
            continue
        elsewhere = [
            infer.shape(view, other.args[0])
            for other in ast.walk(fdef)
            if isinstance(other, ast.Call) and other is not call and other.args
            and isinstance(other.args[0], ast.Name) and edits.text(view, other.func) == callee
        ]
        if any(s is not None and len(s) == len(shape) + 1 and s[1:] == shape for s in elsewhere):
            yield _edit(view, call.args[0], "{a}.unsqueeze(0)", f"`{callee}` is given a batch elsewhere in this "
                        f"function ({', '.join(str(tuple(s)) for s in elsewhere if s)}); "
                        f"`{edits.text(view, call.args[0])}` ({tuple(shape)}) is one sample: add the batch dimension.", 2)



def _inferred_size(view: View) -> Iterator[GeneratedRepair | None]:
    """`-1` for the one size of a `view`/`reshape` that keeps it from multiplying out to the input's elements."""
    found = view.says(_INVALID_SHAPE)
    if not found:
        return
    sizes = [int(part) for part in found.group(1).split(",") if part.strip()]
    elements = int(found.group(2))
    if not sizes or -1 in sizes:
        return
    for call in make.calls(view):
        if not (isinstance(call.func, ast.Attribute) and call.func.attr in _RESHAPES) or call.keywords:
            continue
        args: list[ast.expr] = list(call.args)
        if len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List)):
            args = list(args[0].elts)
        if len(args) != len(sizes) or any(isinstance(a, ast.Starred) for a in args):
            continue
        for index, arg in enumerate(args):
            others = math.prod(sizes[:index] + sizes[index + 1 :])
            if others and elements % others == 0 and elements // others != sizes[index]:
                yield make.changed(view, edits.replace(view, [(arg, "-1")]),
                                   f"`{edits.text(view, call)}` asks for {tuple(sizes)}, {math.prod(sizes)} elements, "
                                   f"of a tensor of {elements}: let `{call.func.attr}` infer size {index} "
                                   f"(`{edits.text(view, arg)}`, {sizes[index]} here, {elements // others} for this "
                                   "tensor).", FAMILY, 2)


def _expanded_entries(view: View) -> Iterator[GeneratedRepair | None]:
    """Each element of a `stack` expanded to the common size, when the sizes differ only where one is 1."""
    found = view.says(_STACK)
    if not found:
        return
    first, other = ([int(x) for x in g.split(",") if x.strip()] for g in found.groups())
    if len(first) != len(other) or not all(a == b or 1 in (a, b) for a, b in zip(first, other)):
        return
    sizes = ", ".join(str(max(a, b)) if a != b else "-1" for a, b in zip(first, other))
    for call in make.calls(view):
        if make.name_of(call.func) != "stack" or not call.args:
            continue
        elements = call.args[0]
        if isinstance(elements, (ast.ListComp, ast.GeneratorExp)):
            code = edits.replace(view, [(elements.elt, f"{edits.atom(view, elements.elt)}.expand({sizes})")])
        else:
            item = view.fresh("t")
            listed = f"[{item}.expand({sizes}) for {item} in {edits.text(view, elements)}]"
            code = edits.replace(view, [(elements, listed)])
        yield make.changed(view, code, f"The tensors stacked differ only where one has size 1 ({tuple(first)} and "
                           f"{tuple(other)}): expand each to {tuple(max(a, b) for a, b in zip(first, other))} "
                           "(the size-1 dimension repeated) before stacking.", FAMILY, 2)
