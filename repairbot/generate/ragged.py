"""A batch made from a list whose items differ in shape: keep the good samples, not the batch's fate.

`np.array(rows)`, `torch.stack(rows)` and `torch.tensor(rows)` fail when one sample of the list has
another shape than the rest (a record that lost a value when its write was cut short, a document
longer than the model's window). The report names that list and the shape most of its items have
(`CrashReport.operands`: `expect["item_shape"]`, the odd items by position). A person keeps the good
samples; so the candidates here, each a small edit just before the faulty statement (in the loop, so
it holds for every later batch made the same way):

- the samples of the other shape left out of the list the batch is made from:
  `chunk = [r for r in chunk if len(r["x"]) == 16]` for `np.array([r["x"] for r in chunk])`, or
  `rows = [t for t in rows if tuple(t.shape) == (24,)]` for `torch.stack(rows)` — rows dropped, counted
  by the account when the run goes on;
- where every odd sample is a sequence of integer ids longer than the others: each cut to the others'
  length (`rows = [t[:24] for t in rows]`), as a model's window cuts a long text; no sample is dropped.

A list that another list walks beside (a label for each record, built from the same list) loses the
same samples only when it is made from the list filtered here: the filter goes on the list the
comprehension walks, so the labels made from it after the faulty statement follow it. The trial says
whether the rest of the iteration agrees.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

from repairbot.generate import edits, make
from repairbot.generate.candidate import CUTS_SEQUENCES, DROPS_ELEMENTS, GeneratedRepair
from repairbot.generate.view import View

FAMILY = "exceptional_data"


def propose(view: View) -> Iterator[GeneratedRepair | None]:
    if view.statement is None:
        return
    for operand in view.report.operands:
        shape = _shape(operand.expect.get("item_shape"))
        if operand.function != view.site.qualname or shape is None:
            continue
        node = _node(operand.expression)
        if isinstance(node, ast.ListComp):
            yield from _comprehension(view, node, shape, operand.expression.strip())
        elif isinstance(node, ast.Name):
            yield from _list(view, node.id, shape, operand.facts)


def _shape(value: Any) -> list[int] | None:
    """The shape the report says most items have, when it is one (a list of ints)."""
    if isinstance(value, list) and value and all(type(size) is int for size in value):
        return value
    return None


def _node(expression: str) -> ast.expr | None:
    try:
        return ast.parse(expression.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        return None


def _test(item: str, shape: list[int]) -> str:
    """The condition an item of the common shape meets: its length, or its whole shape."""
    if len(shape) == 1:
        return f"len({item}) == {shape[0]}"
    return f"tuple({item}.shape) == {tuple(shape)!r}"


def _comprehension(view: View, node: ast.ListComp, shape: list[int], text: str) -> Iterator[GeneratedRepair | None]:
    """`[E for v in L]` (`text`, as written): the items of `L` whose `E` is of another shape left out of `L`."""
    loop = node.generators[0]
    if len(node.generators) != 1 or loop.ifs or not isinstance(loop.target, ast.Name) \
            or not isinstance(loop.iter, ast.Name):
        return
    walked, item = loop.iter.id, loop.target.id
    element = ast.get_source_segment(text, node.elt) or ast.unparse(node.elt)
    yield _filtered(view, walked, f"{walked} = [{item} for {item} in {walked} if {_test(element, shape)}]",
                    f"`{element}` of each item of `{walked}`", shape)


def _list(view: View, name: str, shape: list[int], facts: dict[str, Any]) -> Iterator[GeneratedRepair | None]:
    """A list of samples: those of another shape cut to the common length (integer sequences longer
    than the rest), or left out."""
    item = view.fresh("_daifu_item")
    odd = facts.get("odd_items") or []
    longer = len(shape) == 1 and odd and all(
        isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], list) and len(entry[1]) == 1
        and isinstance(entry[1][0], int) and entry[1][0] > shape[0] for entry in odd)
    if longer and str(facts.get("item_dtype", "")).startswith(("int", "uint")):
        code = edits.insert_before(view, view.statement, f"{name} = [{item}[:{shape[0]}] for {item} in {name}]") \
            if view.statement is not None else None
        yield make.changed(view, code, f"`{name}` holds sequences of {shape[0]} ids but for "
                           f"{_positions(odd)} longer: cut those to the first {shape[0]}, as the others are, "
                           "then make the batch again.", FAMILY, 2, gives_up=CUTS_SEQUENCES)
    yield _filtered(view, name, f"{name} = [{item} for {item} in {name} if {_test(item, shape)}]",
                    f"the items of `{name}`", shape, evidence=1 if longer else 2)


def _filtered(view: View, name: str, line: str, what: str, shape: list[int],
              evidence: int = 2) -> GeneratedRepair | None:
    if view.statement is None:
        return None
    return make.changed(view, edits.insert_before(view, view.statement, line),
                        f"{what} should have shape {tuple(shape)}, as most do: leave out the samples of another "
                        f"shape, before the batch is made from `{name}`, then make it again.", FAMILY, evidence,
                        gives_up=DROPS_ELEMENTS)


def _positions(odd: list[Any]) -> str:
    return "item " + ", ".join(str(entry[0]) for entry in odd if isinstance(entry, list) and entry)
