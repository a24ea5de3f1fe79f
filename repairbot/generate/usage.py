"""What the function does with a value: which kind of value a place needs, and whether it only reports it.

The families that replace a value (a key the dict does hold, a default for a missing one, 0.0 for a
quotient by zero) must not change what the program trains on. Two questions settle it, read from the
syntax tree around a node of the faulty statement:

- `expected`: the categories of value the place can take — a number where it is added, compared or
  formatted with `:.3f`; something callable where it is called; a list where `.append` is called on
  it; the kind of the items of the list it is appended to (the report's facts say);
- `reported` and `only_reported`: whether the value goes nowhere but into a report of the run — printed,
  logged, formatted into text, appended to a list of numbers — so that a default or a guard changes what
  the run says, never what it computes.

Kinds are the report's (`daifu.report.lookups.kind_of`): `float`, `list[float]`, `Tensor`, `method`...
"""

from __future__ import annotations

import ast

from repairbot.generate.view import View

NUMBER = "number"
TENSOR = "tensor"
CALLABLE = "callable"
LIST = "list"
MAPPING = "mapping"
TEXT = "text"
OTHER = "other"
UNKNOWN = "unknown"

_NUMBERS = frozenset({"int", "float", "bool", "numpy.float64", "numpy.float32", "numpy.int64", "numpy.int32"})
_CALLABLES = frozenset({"method", "function", "Module", "type"})
_MAPPINGS = frozenset({"dict", "collections.OrderedDict", "collections.defaultdict", "collections.Counter"})
REPORTERS = frozenset({
    "print", "info", "debug", "warning", "warn", "error", "log", "write", "add_scalar", "add_scalars",
    "set_postfix", "set_description", "set_postfix_str",
})
"""Calls that only show or log what they are given."""
_LIST_METHODS = frozenset({"append", "extend", "insert"})
_MAPPING_METHODS = frozenset({"update", "items", "keys", "values", "get", "setdefault"})
_ARITHMETIC = (ast.BinOp, ast.AugAssign, ast.Compare, ast.UnaryOp)


def category(kind: str) -> str:
    """The category of a report's kind of value."""
    if kind in _NUMBERS:
        return NUMBER
    if kind in ("Tensor", "Parameter"):
        return TENSOR
    if kind in _CALLABLES:
        return CALLABLE
    if kind.startswith(("list", "tuple", "collections.deque", "deque")):
        return LIST
    if kind in _MAPPINGS:
        return MAPPING
    if kind == "str":
        return TEXT
    if kind in ("property", "unknown", ""):
        return UNKNOWN
    return OTHER


def expected(view: View, node: ast.AST) -> set[str] | None:
    """The categories of value `node`'s place in the statement can take; `None` when its use does not say."""
    parent = view.parent(node)
    if isinstance(parent, ast.Call) and parent.func is node:
        return {CALLABLE}
    if isinstance(parent, ast.Attribute) and parent.value is node:
        if parent.attr in _LIST_METHODS:
            return {LIST}
        if parent.attr in _MAPPING_METHODS:
            return {MAPPING}
        return None
    if isinstance(parent, _ARITHMETIC):
        return {NUMBER, TENSOR}
    if isinstance(parent, ast.FormattedValue) and _numeric_spec(parent):
        return {NUMBER, TENSOR}
    if isinstance(parent, ast.Call) and node in parent.args and _appended_to(view, parent) is not None:
        return _appended_to(view, parent)
    if isinstance(parent, (ast.For, ast.comprehension)) and parent.iter is node:
        return {LIST, MAPPING, TENSOR, TEXT}
    return None


def numeric_format(spec: str) -> bool:
    """Whether a format spec (`.3f`, `d`, `.1%`) takes a number only."""
    return bool(spec) and spec[-1] in "bcdeEfFgGnoxX%"


def _numeric_spec(value: ast.FormattedValue) -> bool:
    spec = value.format_spec
    if not isinstance(spec, ast.JoinedStr):
        return False
    text = "".join(part.value for part in spec.values if isinstance(part, ast.Constant) and isinstance(part.value, str))
    return numeric_format(text)


def _appended_to(view: View, call: ast.Call) -> set[str] | None:
    """The category of the items of the list `call` appends to (`scores.append(x)`), from the report's facts."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr == "append" and isinstance(func.value, ast.Name)):
        return None
    items = view.facts(func.value.id).get("items")
    kinds = {category(str(item.get("type", ""))) for item in items or [] if isinstance(item, dict)}
    return kinds if len(kinds) == 1 and UNKNOWN not in kinds else None


def _into_numbers(view: View, call: ast.Call) -> bool:
    """Whether `call` appends to a list of numbers, or to a list still empty (a history being started)."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        return False
    empty = view.type_of(func.value.id) == "list" and view.facts(func.value.id).get("len") == 0
    return empty or _appended_to(view, call) == {NUMBER}


def reported(view: View, node: ast.AST) -> bool:
    """Whether `node`'s value, where the statement uses it, only goes into a report of the run: an
    argument of a print or a logger, a field of an f-string or of `str.format`, a `%` format's values, an
    item appended to a list of numbers."""
    current = node
    while True:
        parent = view.parent(current)
        if parent is None or isinstance(parent, ast.stmt):
            return False
        if isinstance(parent, (ast.JoinedStr, ast.FormattedValue)):
            return True
        if isinstance(parent, ast.Call) and current is not parent.func:
            name = parent.func.attr if isinstance(parent.func, ast.Attribute) else getattr(parent.func, "id", "")
            if name in REPORTERS or name in ("format", "format_map"):
                return True
            if name == "append" and _into_numbers(view, parent):
                return True
            if name not in ("float", "round", "int", "str", "abs"):
                return False
        if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Mod) and current is parent.right and (
                isinstance(parent.left, ast.Constant) and isinstance(parent.left.value, str)):
            return True
        current = parent


def only_reported(view: View, name: str, statement: ast.stmt) -> bool:
    """Whether every read of `name` in the function, outside `statement`, only reports it (see `reported`),
    and the function reads it somewhere: what `statement` assigns to it then changes no computation."""
    fdef = view.fdef
    if fdef is None:
        return False
    inside = {id(n) for n in ast.walk(statement)}
    reads = [n for n in ast.walk(fdef) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
             and id(n) not in inside]
    return bool(reads) and all(reported(view, read) for read in reads)
