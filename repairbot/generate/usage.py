"""What the function does with a value: which kind of value a place needs, and whether it only reports it.

The families that replace a value (a key the dict does hold, a default for a missing one, 0.0 for a
quotient by zero) must not change what the program trains on. Two questions settle it, read from the
syntax tree around a node of the faulty statement:

- `expected`: the categories of value the place can take — a number where it is added, compared or
  formatted with `:.3f`; something callable where it is called; a list where `.append` is called on
  it; the kind of the items of the list it is appended to (the report's facts say);
- `reported` and `only_reported`: whether the value goes nowhere but into a report of the run — printed,
  logged, formatted into text, appended to a list of numbers — so that a default or a guard changes what
  the run says, never what it computes;
- `measures`: whether the value is a measurement of the run — reported, or compared in a condition
  (the best score so far picks the weights kept), or combined by arithmetic into other such values
  (precision into F1) — and never an operand of what the run computes (a loss, a learning rate, a size).

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


def _a_record(view: View, item: ast.AST, call: ast.Call) -> bool:
    """Whether `call` appends `item`, a record of named fields (`{"step": step, "f1": f1}`), to a list of
    such records or to a list still empty (a history of evaluations being started)."""
    if not (isinstance(item, ast.Dict) and item.keys and all(isinstance(k, ast.Constant) and isinstance(k.value, str)
                                                             for k in item.keys)):
        return False
    func = call.func
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        return False
    empty = view.type_of(func.value.id) == "list" and view.facts(func.value.id).get("len") == 0
    return empty or _appended_to(view, call) == {MAPPING}


def reported(view: View, node: ast.AST) -> bool:
    """Whether `node`'s value, where the statement uses it, only goes into a report of the run: an
    argument of a print or a logger, a field of an f-string or of `str.format`, a `%` format's values, an
    item appended to a list of numbers, a field of a record appended to a list of records."""
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
            if name == "append" and (_into_numbers(view, parent) or _a_record(view, current, parent)):
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


_MEASURE_CALLS = frozenset({"float", "round", "abs", "min", "max", "int"})
"""Calls through which a number stays the same measurement, changed only in form."""


def measures(view: View, name: str, statement: ast.stmt) -> list[ast.stmt] | None:
    """The statements that compute other measures from `name` (`f1 = ...` from `precision`), when every read
    of `name` outside `statement` only reports it, compares it in a condition, or computes by arithmetic
    another name of which the same holds (see the module docstring); `None` when a read goes anywhere else
    (a call, a subscript, a `return`: a computation) or the function never reads it."""
    fdef = view.fdef
    if fdef is None:
        return None
    seen: set[str] = set()
    made: list[ast.stmt] = []
    pending = [(name, statement)]
    while pending:
        current, made_by = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        inside = {id(n) for n in ast.walk(made_by)}
        reads = [n for n in ast.walk(fdef) if isinstance(n, ast.Name) and n.id == current
                 and isinstance(n.ctx, ast.Load) and id(n) not in inside]
        if current == name and not reads:
            return None
        for read in reads:
            if reported(view, read) or _in_condition(view, read):
                continue
            into = _measure_made(view, read)
            if into is None:
                return None
            pending += into
            made += [assign for _, assign in into if assign not in made]
    return made


def _in_condition(view: View, node: ast.AST) -> bool:
    """Whether `node` (through arithmetic and a comparison) is the test of an `if`, a `while` or a conditional
    expression, or part of one (`precision + recall` in `... if precision + recall else 0.0`)."""
    test = _lifted(view, node)
    if isinstance(view.parent(test), ast.Compare):
        test = view.parent(test)  # type: ignore[assignment]
    above = view.parent(test)
    while isinstance(above, (ast.BoolOp, ast.UnaryOp)):
        test, above = above, view.parent(above)
    return isinstance(above, (ast.If, ast.While, ast.IfExp)) and above.test is test


def _lifted(view: View, node: ast.AST) -> ast.AST:
    """`node`, or the outermost expression around it that only does arithmetic on it (`2 * p * r`), through
    the calls that change only its form (`round(f1, 4)`) and the branches of a conditional expression."""
    current, parent = node, view.parent(node)
    while isinstance(parent, (ast.BinOp, ast.UnaryOp)) or (
            isinstance(parent, ast.Call) and _measure_call(parent) and current is not parent.func) or (
            isinstance(parent, ast.IfExp) and current is not parent.test):
        current, parent = parent, view.parent(parent)
    return current


def _measure_made(view: View, node: ast.AST) -> list[tuple[str, ast.stmt]] | None:
    """The names (with the statement assigning them) that `node`'s value goes into by arithmetic alone: `f1`
    for `precision` in `f1 = 2 * precision * recall / ...`, `best` in `best, at = score, step`; `None`
    when it goes anywhere else."""
    current = _lifted(view, node)
    parent = view.parent(current)
    if isinstance(parent, ast.Tuple) and isinstance(view.parent(parent), ast.Assign):
        assign = view.parent(parent)
        assert isinstance(assign, ast.Assign)
        index = parent.elts.index(current)  # type: ignore[arg-type]
        targets = [t.elts[index] for t in assign.targets
                   if isinstance(t, ast.Tuple) and len(t.elts) == len(parent.elts)]
        if len(targets) != len(assign.targets) or not all(isinstance(t, ast.Name) for t in targets):
            return None
        return [(t.id, assign) for t in targets if isinstance(t, ast.Name)]
    if isinstance(parent, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and parent.value is current:
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        if not all(isinstance(t, ast.Name) for t in targets):
            return None
        return [(t.id, parent) for t in targets if isinstance(t, ast.Name)]
    return None


def _measure_call(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Name) and call.func.id in _MEASURE_CALLS
