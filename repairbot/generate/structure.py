"""A container where one of its items belongs, or the other way round.

- A tuple where a tensor belongs (`logits.max(dim=1)` is a `(values, indices)` pair; an LSTM returns
  `(output, (h, c))`): `name[k]` for each tensor item k, at the statement and where the name was
  computed a line up. The item whose dtype matches the other operand of the comparison or the
  arithmetic it is in comes first (indices, int64, compared with int64 labels).
- A module where an iterable of tensors belongs ("'Net' object is not iterable"): `model.parameters()`.
- A list indexed by a key ("list indices must be integers or slices, not str": `param_groups['lr']`):
  the statement applied to every item (`for group in optimizer.param_groups: group['lr'] /= 4`) when it
  assigns, or to the first item when it reads.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

from repairbot.generate import edits, infer, make
from repairbot.generate.candidate import GeneratedRepair
from repairbot.generate.view import View

FAMILY = "structure"
_TUPLE_HINT = r"tuple|'bool' object|not iterable|has no attribute|must be Tensor|expected Tensor|unpack"


def propose(view: View) -> Iterator[GeneratedRepair | None]:
    if view.statement is None:
        return
    if view.exception_types & {"TypeError", "AttributeError", "RuntimeError", "ValueError"}:
        yield from _tuples(view)
        yield from _module_as_iterable(view)
    if view.says(r"list indices must be integers or slices, not str"):
        yield from _list_by_key(view)


def _tuples(view: View) -> Iterator[GeneratedRepair | None]:
    for name in view.reads:
        items = _tensor_items(view, name)
        if not items or view.type_of(name) == "list":
            continue
        hinted = view.says(_TUPLE_HINT) or view.says(rf"'{view.type_of(name)}' object")
        if not hinted:
            continue
        partner = _partner_dtype(view, name)
        assignment = view.earlier_assignment(name)
        for index, item in items:
            fits = partner is not None and item.get("dtype") == partner
            evidence = 2 if fits else (1 if partner is None and index == 0 else 0)
            described = f"item {index} ({item.get('dtype')}, shape {tuple(item.get('shape') or ())})"
            if assignment is not None and assignment.value is not None:
                yield make.changed(view, make.wrap_node(view, assignment.value, "{a}" + f"[{index}]"),
                                   f"`{name}` is a {view.type_of(name)} of {len(_all_items(view, name))} items where a "
                                   f"tensor belongs; keep its {described} where it is computed.", FAMILY, evidence)
            yield make.changed(view, make.wrap_reads(view, name, "{}" + f"[{index}]"),
                               f"`{name}` is a {view.type_of(name)} where a tensor belongs; use its {described}.",
                               FAMILY, evidence)


def _all_items(view: View, name: str) -> list[Any]:
    items = view.facts(name).get("items")
    return items if isinstance(items, list) else []


def _tensor_items(view: View, name: str) -> list[tuple[int, dict[str, Any]]]:
    return [(i, item) for i, item in enumerate(_all_items(view, name))
            if isinstance(item, dict) and item.get("type") == "Tensor"]


def _partner_dtype(view: View, name: str) -> str | None:
    """The dtype of what `name` is compared with or combined with in the statement (`pred == labels`)."""
    for node in view.walk():
        operands: list[ast.expr] = []
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.BinOp):
            operands = [node.left, node.right]
        mine = [o for o in operands if isinstance(o, ast.Name) and o.id == name]
        if mine:
            others = [infer.dtype(view, o) for o in operands if o not in mine]
            known = [d for d in others if d is not None]
            if known:
                return known[0]
    return None


def _module_as_iterable(view: View) -> Iterator[GeneratedRepair | None]:
    found = view.says(r"'(\w+)' object is not iterable")
    if not found:
        return
    for name in view.reads:
        if view.is_module(name) and view.facts(name).get("class") == found.group(1):
            yield make.changed(view, make.wrap_reads(view, name, "{}.parameters()"),
                               f"`{name}` is a {found.group(1)} module where an iterable of its tensors belongs: "
                               f"pass `{name}.parameters()`.", FAMILY, 2)


def _list_by_key(view: View) -> Iterator[GeneratedRepair | None]:
    statement = view.statement
    assert statement is not None
    keyed = [n for n in view.walk() if isinstance(n, ast.Subscript) and _is_key(view, n.slice)]
    for node in keyed:
        container = edits.text(view, node.value)
        target = isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and any(
            node is t for t in _targets(statement))
        if target:
            item = view.fresh(_singular(node.value))
            body = edits.text_with(view, statement, [(node.value, item)])
            loop = f"for {item} in {container}:\n" + "\n".join("    " + line for line in body.splitlines())
            yield make.changed(view, edits.replace_statement(view, statement, loop),
                               f"`{container}` is a list (of dicts); the statement sets a key, so set it in every "
                               "item.", FAMILY, 2)
        yield make.changed(view, make.wrap_node(view, node.value, "{a}[0]"),
                           f"`{container}` is a list (of dicts); index its first item by the key.", FAMILY,
                           0 if target else 1)


def _is_key(view: View, index: ast.expr) -> bool:
    if isinstance(index, ast.Constant):
        return isinstance(index.value, str)
    return isinstance(index, ast.Name) and view.type_of(index.id) == "str"


def _targets(statement: ast.stmt) -> list[ast.expr]:
    if isinstance(statement, ast.Assign):
        return statement.targets
    if isinstance(statement, (ast.AugAssign, ast.AnnAssign)):
        return [statement.target]
    return []


def _singular(node: ast.expr) -> str:
    """A name for one item of `node`: `group` for `optimizer.param_groups`, else `item`."""
    written = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    last = written.rsplit("_", 1)[-1]
    return last[:-1] if last.endswith("s") and len(last) > 2 and last.isidentifier() else "item"
