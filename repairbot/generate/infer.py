"""The shape and dtype of an expression, worked out from the report's facts without running anything.

The report gives the shape and dtype of each live tensor; the faulty statement often passes an
expression built from them (`x_val[0]`, `out.view(-1, n)`, `h.float()`). `shape` and `dtype` follow
the few operations whose effect on a shape or a dtype is certain, and answer `None` for anything
else: a family of edits proposes nothing from a guess.
"""

from __future__ import annotations

import ast
import math

from repairbot.generate.view import View

Shape = list[int]

_SAME_SHAPE = frozenset(
    "float double half bfloat16 long int short bool byte to cpu cuda detach clone contiguous type_as "
    "requires_grad_ abs exp log sigmoid tanh relu softmax log_softmax neg sqrt nan_to_num clamp".split()
)
_CASTS = {
    "float": "float32", "double": "float64", "half": "float16", "bfloat16": "bfloat16", "long": "int64",
    "int": "int32", "short": "int16", "bool": "bool", "byte": "uint8",
}
_KEEP_DTYPE = frozenset(
    "detach clone contiguous cpu cuda view reshape flatten squeeze unsqueeze t transpose permute expand "
    "requires_grad_ abs neg clamp".split()
)


def shape(view: View, node: ast.AST) -> Shape | None:
    """The shape `node` evaluates to, when the facts and the operations make it certain."""
    try:
        return _shape(view, node, 0)
    except (ValueError, IndexError, ZeroDivisionError, TypeError):
        return None


def _shape(view: View, node: ast.AST, depth: int) -> Shape | None:
    if depth > 12:
        return None
    if isinstance(node, ast.Name):
        found = view.facts(node.id).get("shape") if view.is_tensor(node.id) else None
        return list(found) if isinstance(found, list) and all(isinstance(d, int) for d in found) else None
    if isinstance(node, ast.Subscript):
        inner = _shape(view, node.value, depth + 1)
        return None if inner is None else _index(view, inner, node.slice)
    if isinstance(node, ast.Attribute) and node.attr in ("T", "mT"):
        inner = _shape(view, node.value, depth + 1)
        if inner is None or len(inner) < 2:
            return None
        return inner[::-1] if node.attr == "T" else inner[:-2] + [inner[-1], inner[-2]]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        inner = _shape(view, node.func.value, depth + 1)
        if inner is None:
            return None
        return _method(inner, node.func.attr, [_int(a) for a in node.args], node)
    return None


def _index(view: View, shape: Shape, index: ast.expr) -> Shape | None:
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    result: Shape = []
    position = 0
    for part in parts:
        if position >= len(shape):
            return None
        if isinstance(part, ast.Slice):
            if part.lower is None and part.upper is None and part.step is None:
                result.append(shape[position])
            else:
                lower = _int(part.lower, view) if part.lower else 0
                upper = _int(part.upper, view) if part.upper else shape[position]
                if lower is None or upper is None or part.step is not None:
                    return None
                result.append(max(0, min(upper, shape[position]) - max(lower, 0)))
            position += 1
        elif isinstance(part, ast.Constant) and part.value is None:
            result.append(1)
        elif _int(part, view) is not None:
            position += 1
        else:
            return None
    return result + shape[position:]


def _method(shape: Shape, name: str, args: list[int | None], node: ast.Call) -> Shape | None:
    if name in _SAME_SHAPE:
        return shape
    if name in ("unsqueeze", "squeeze", "flatten", "transpose", "view", "reshape", "permute") and None in args:
        return None
    if name == "unsqueeze" and len(args) == 1:
        k = args[0] if args[0] >= 0 else len(shape) + 1 + args[0]  # type: ignore[operator]
        return shape[:k] + [1] + shape[k:]
    if name == "squeeze":
        if not args:
            return [d for d in shape if d != 1]
        k = args[0] % len(shape)  # type: ignore[operator]
        return shape[:k] + shape[k + 1 :] if shape[k] == 1 else shape
    if name == "flatten":
        start = (args[0] if args else 0) % max(len(shape), 1)  # type: ignore[operator]
        end = (args[1] if len(args) > 1 else -1) % max(len(shape), 1)  # type: ignore[operator]
        return shape[:start] + [math.prod(shape[start : end + 1])] + shape[end + 1 :]
    if name == "t" and len(shape) == 2:
        return shape[::-1]
    if name == "transpose" and len(args) == 2:
        a, b = args[0] % len(shape), args[1] % len(shape)  # type: ignore[operator]
        result = list(shape)
        result[a], result[b] = result[b], result[a]
        return result
    if name in ("view", "reshape") and args and not node.keywords:
        return _reshaped(shape, [a for a in args if a is not None])
    return None


def _reshaped(shape: Shape, sizes: list[int]) -> Shape | None:
    total = math.prod(shape)
    known = math.prod(s for s in sizes if s != -1)
    if sizes.count(-1) > 1 or known == 0:
        return None
    result = [total // known if s == -1 else s for s in sizes]
    return result if math.prod(result) == total else None


def _int(node: ast.AST | None, view: View | None = None) -> int | None:
    """The integer `node` certainly is: a literal, or (given the view) a name holding an int."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int(node.operand, view)
        return -inner if inner is not None else None
    if view is not None and isinstance(node, ast.Name) and view.type_of(node.id) == "int":
        value = view.facts(node.id).get("value")
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    return None


def dtype(view: View, node: ast.AST) -> str | None:
    """The dtype `node` evaluates to (`float32`, `int64`...), when certain."""
    if isinstance(node, ast.Name):
        found = view.facts(node.id).get("dtype") if view.is_tensor(node.id) else None
        return found if isinstance(found, str) else None
    if isinstance(node, ast.Subscript):
        return dtype(view, node.value)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr in _CASTS and not node.args:
            return _CASTS[node.func.attr]
        if node.func.attr in _KEEP_DTYPE:
            return dtype(view, node.func.value)
    return None


def floating(dtype_name: str | None) -> bool:
    return dtype_name is not None and dtype_name.startswith(("float", "bfloat"))


def cast_keeps_values(have: str | None, target: str, whole: object) -> bool:
    """Whether casting a tensor of dtype `have` to `target` keeps every value: always, but floats to an
    integer dtype, which keep them only when they are whole numbers (`whole`, the report's fact)."""
    return not floating(have) or floating(target) or target == "bool" or whole is True


CAST_METHODS = {v: k for k, v in _CASTS.items()}
"""The tensor method that converts to each dtype (`float32` -> `float`)."""
