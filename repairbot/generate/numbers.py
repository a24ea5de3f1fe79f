"""Numbers of the wrong kind: a float where an int is needed, an int where a size tuple is, a tensor
where a plain number is.

Two sources of evidence. Python's own messages ("'float' object cannot be interpreted as an
integer", "slice indices must be integers"), and any TypeError that names `float`, say only that a
float met an int's place: the
candidates are `//` for each `/` of the statement, `int(...)` around each float it reads, and the
same at the statement a line up that computed the float (`n = size / 2`), where the fix belongs.
PyTorch's argument parser says more: which function, which argument, what it needed and what it
got ("narrow() received an invalid combination of arguments - got (int, int, float), but expected
one of: * (int dim, int start, int length)", "argument 'size' (position 1) must be tuple of ints,
not int"). Each overload of the same arity is compared with the call, and each mismatched argument
converted: `int(x)`, `(x,)`, `float(x)`, `x[0]` for a tuple where a tensor belongs.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from repairbot.generate import counts, edits, make
from repairbot.generate.candidate import ROUNDS_DOWN, GeneratedRepair
from repairbot.generate.view import View

FAMILY = "numbers"
_PYTHON_FLOAT = (
    r"'float' object cannot be interpreted as an integer|slice indices must be integers"
    r"|indices must be integers or slices, not float|must be int, not float|got float|must be tuple of ints"
    r"|element of type float|only integer tensors of a single element"
)
_COMBINATION = re.compile(r"(\w+)\(\) received an invalid combination of arguments - got \(([^)]*)\)", re.IGNORECASE)
_ARGUMENT = re.compile(
    r"(\w+)\(\): argument '(\w+)' \(position (\d+)\) must be (.+?), (?:not|but found element of type) (\w+)",
    re.IGNORECASE,
)
_OVERLOAD = re.compile(r"^\s*\* \((.*)\)\s*$", re.MULTILINE)
_KINDS = {
    "int": "int", "SymInt": "int", "int64_t": "int", "float": "float", "double": "float", "Scalar": "number",
    "Tensor": "Tensor", "bool": "bool", "tuple of ints": "ints", "tuple of SymInts": "ints", "int[]": "ints",
    "SymInt[]": "ints", "IntArrayRef": "ints",
}
_CONVERT = {
    ("float", "int"): "int({})", ("float", "ints"): "(int({}),)", ("int", "ints"): "({},)",
    ("Tensor", "int"): "int({})", ("Tensor", "float"): "float({})", ("Tensor", "number"): "{a}.item()",
    ("tuple", "Tensor"): "{a}[0]",
}


def propose(view: View) -> Iterator[GeneratedRepair | None]:
    """Candidates for a number of the wrong kind (see the module docstring)."""
    if view.statement is None or not view.exception_types & {"TypeError", "RuntimeError", "ValueError", "IndexError"}:
        return
    yield from _argument_parser(view)
    if (view.says(_PYTHON_FLOAT) or view.says(r"received an invalid combination.*\bfloat\b")
            or ("TypeError" in view.exception_types and view.says(r"\bfloat\b"))):
        yield from _float_as_int(view)


def _float_as_int(view: View) -> Iterator[GeneratedRepair | None]:
    divisions = [n for n in view.walk() if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div)]
    for node in divisions:
        yield make.changed(view, _floor(view, node), "Use floor division: `/` always gives a float, and a size, an "
                           "index or a count must be an int.", FAMILY, 1)
    floats = [name for name in view.reads if view.type_of(name) == "float"]
    for name in floats:
        remainder = counts.loses_remainder(view, name)
        down = ROUNDS_DOWN if remainder else ""
        assignment = view.earlier_assignment(name)
        if assignment is not None and assignment.value is not None:
            value = assignment.value
            inner = [n for n in ast.walk(value) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div)]
            for node in inner:
                if remainder:
                    yield make.changed(view, counts.ceiling(view, node),
                                       f"`{name}` counts the iterations of a `range`, and the line that computes it "
                                       "divides with `/`, leaving a remainder: round it up there, so the last, "
                                       "partial batch is reached too.", FAMILY, 2)
                yield make.changed(view, _floor(view, node), f"`{name}` is a float because the line that computes "
                                   f"it divides with `/`; use `//` there, so `{name}` is an int wherever it is used.",
                                   FAMILY, 2, down)
            yield make.changed(view, make.wrap_node(view, value, "int({})"),
                               f"Make `{name}` an int where it is computed.", FAMILY, 1, down)
        yield make.changed(view, make.wrap_reads(view, name, "int({})"),
                           f"`{name}` is a float ({view.variable(name).text if view.variable(name) else ''}); "  # type: ignore[union-attr]
                           "convert it with `int(...)` where the statement uses it.", FAMILY, 1, down)


def _floor(view: View, node: ast.BinOp) -> str | None:
    return edits.replace_between(view, node.left, node.right, "/", "//")


# -- PyTorch's argument parser ---------------------------------------------------------------------


def _argument_parser(view: View) -> Iterator[GeneratedRepair | None]:
    found = view.says(_COMBINATION)
    if found:
        function, got = found.group(1), _positional(found.group(2))
        for call in _calls_named(view, function, len(got)):
            for expected in _overloads(view.message, len(got)):
                conversions = [(index, have, want) for index, (have, want) in enumerate(zip(got, expected))
                               if not _fits(have, want)]
                if conversions and all((have, want) in _CONVERT for _, have, want in conversions):
                    changes = [(call.args[i], _CONVERT[(have, want)]) for i, have, want in conversions]
                    yield _converted(view, function, changes, conversions)
    found = view.says(_ARGUMENT)
    if found:
        function, argument, position, want_text, have = found.groups()
        want = _KINDS.get(want_text.strip(), "")
        for call in _calls_named(view, function, None):
            node = _argument(call, argument, int(position))
            if node is None:
                continue
            if "element of type" in found.group(0) and isinstance(node, (ast.Tuple, ast.List)):
                yield from (make.changed(view, make.wrap_node(view, element, "int({})"),
                                         f"`{function}` needs a tuple of ints; make this element an int.", FAMILY, 2)
                            for element in node.elts if not (isinstance(element, ast.Constant)
                                                             and isinstance(element.value, int)))
                continue
            template = _CONVERT.get((_have(have), want))
            if template is not None:
                yield _converted(view, function, [(node, template)], [(int(position) - 1, _have(have), want)])


def _converted(view: View, function: str, changes: list[tuple[ast.expr, str]],
               conversions: list[tuple[int, str, str]]) -> GeneratedRepair | None:
    texts = [(node, template.format(edits.text(view, node), a=edits.atom(view, node))) for node, template in changes]
    said = "; ".join(f"argument {i + 1} is {have}, it needs {_said(want)}" for i, have, want in conversions)
    return make.changed(view, edits.replace(view, texts),
                        f"`{function}()` rejected its arguments ({said}); convert them as its signature asks.",
                        FAMILY, 2)


def _said(kind: str) -> str:
    return {"ints": "a tuple of ints", "number": "a number"}.get(kind, f"{'an' if kind == 'int' else 'a'} {kind}")


def _positional(got: str) -> list[str]:
    return [_have(part.strip()) for part in got.split(",") if part.strip() and "=" not in part]


def _have(name: str) -> str:
    return {"torch.Tensor": "Tensor", "numpy.ndarray": "ndarray", "list": "list"}.get(name, name)


def _overloads(message: str, arity: int) -> Iterator[list[str]]:
    """The positional parameter kinds of each overload the message lists that takes `arity` of them."""
    for found in _OVERLOAD.finditer(message):
        params = []
        for part in found.group(1).split(", "):
            if part.strip() == "*":
                break
            declared = part.split(" = ")[0].rsplit(" ", 1)[0].strip()
            params.append((_KINDS.get(declared, declared), " = " in part))
        required = sum(1 for _, optional in params if not optional)
        if required <= arity <= len(params):
            yield [kind for kind, _ in params[:arity]]


def _fits(have: str, want: str) -> bool:
    return have == want or (have == "int" and want in ("float", "number", "SymInt")) or (
        have in ("float", "bool") and want == "number") or (have == "bool" and want == "int")


def _calls_named(view: View, function: str, arity: int | None) -> list[ast.Call]:
    wanted = function.lstrip("_")
    return [
        call for call in make.calls(view)
        if (make.name_of(call.func) or "").lstrip("_") == wanted
        and (arity is None or len(call.args) == arity)
        and not any(isinstance(a, ast.Starred) for a in call.args)
    ]


def _argument(call: ast.Call, name: str, position: int) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    if 0 < position <= len(call.args):
        return call.args[position - 1]
    return None
