"""Edits where the bad value was made: the report names the wrong operand, the def-use chain finds its origin.

The report says which operand the failing call did not expect and what it expected
(`CrashReport.operands`, built by `daifu.report.operands`): labels numbered 1..5 for a loss of 5
classes, a float64 tensor for a float32 layer, a float where an int belongs, a tensor of as many
rows as a configured batch size where the data has fewer. The statement that crashed only reveals
it; the fix belongs where the value was made, so that every later use sees the right value (the
accuracy computed from the same labels, the next batch). From the wrong operand's names this family
follows the function's def-use chains (`repairbot.generate.trace`) back through the statements that
carry the same fault (a tensor of the same wrong dtype, integer labels, a float) to the statement
that made it, and proposes the typed edit there:

- a cast (`.float()`, `.long()`...) of the value made with the wrong dtype (`torch.from_numpy(a)`);
- `- 1` on labels or ids made from data numbered from 1, when the live values show exactly that
  offset against the class count (smallest 1, largest the count) and nothing on the way holds a 0;
- `//` for each `/` that made a float where an int belongs, or `int(...)` around the value; for a count
  of a `range` whose division leaves a remainder, the count rounded up first (floor would drop it);
- a size read from this iteration's data (`real.size(0)`) in place of the configured number
  (`batch_size`, `args.batch_size`) in the statements the wrong tensor was made from.

An edit goes on the last statement of the chain that resuming the run executes again (one in the
iteration the crash interrupted; a value made before the loop is edited where the iteration takes
it); a value taken from the loop's iterable is rebound at the top of the loop's body. Each candidate
is a whole surgery, tried like any other; these rank before the edits at the crashing statement,
which the other families propose.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from typing import Any

from repairbot.generate import counts, edits, infer, make
from repairbot.generate.candidate import ROUNDS_DOWN, GeneratedRepair
from repairbot.generate.trace import Link, binding, bound_names, definition, interrupted_loop, reads, slice_of
from repairbot.generate.view import View
from repairbot.protocol import Operand

FAMILY = "origin"
AT_ORIGIN = 3
"""Evidence of an edit where the facts put the fault: above the edits at the crash (at most 2)."""
_CHAIN = 8
"""Links followed back from one operand."""


def propose(view: View) -> Iterator[GeneratedRepair | None]:
    if not view.outermost or view.statement is None or view.fdef is None:
        return
    for operand in view.report.operands:
        if not operand.expect or operand.function != view.site.qualname:
            continue
        names = _names(operand.expression)
        if not names:
            continue
        expect = operand.expect
        if isinstance(expect.get("dtype"), str):
            yield from _cast(view, operand, names, expect["dtype"])
        if isinstance(expect.get("classes") or expect.get("embeddings"), int):
            yield from _offset(view, operand, names, int(expect.get("classes") or expect["embeddings"]))
        if expect.get("int") is True:
            yield from _integer(view, names)
        if isinstance(expect.get("rows"), int) and isinstance(expect.get("sized_by"), str):
            yield from _data_size(view, operand, names, expect["rows"], expect["sized_by"])


def _names(expression: str) -> list[str]:
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError):
        return []
    return reads(tree.body)


# -- following a fault back ---------------------------------------------------------------------------


def chain(view: View, name: str, carries: Callable[[str], bool], first: Link | None = None) -> list[Link]:
    """The links from the faulty statement back to where `name`'s value was made: a link whose value reads
    exactly one name that `carries` the fault is followed through that name (from `first`, when given)."""
    links: list[Link] = []
    current, use = name, view.statement
    assert use is not None
    for _ in range(_CHAIN):
        link = first if first is not None and not links else definition(view, current, use)
        if link is None:
            break
        links.append(link)
        if link.kind != "assign" or link.value is None:
            break
        carriers = [read for read in reads(link.value) if carries(read)]
        if len(carriers) != 1:
            break
        current, use = carriers[0], link.statement
    return links


def chains(view: View, name: str, carries: Callable[[str], bool]) -> list[list[Link]]:
    """`chain`, and where it stops at an `if` that binds its name in both branches, the chain on from each
    branch's binding: which branch ran is not in the report, so each is a candidate for its own trial."""
    links = chain(view, name, carries)
    last = links[-1] if links else None
    if last is None or last.kind != "other" or not isinstance(last.statement, ast.If):
        return [links]
    found = []
    for branch in (last.statement.body, last.statement.orelse):
        bindings = [statement for statement in branch if last.name in bound_names(statement)]
        if bindings:
            found.append(links[:-1] + chain(view, last.name, carries, binding(view, last.name, bindings[-1])))
    return found or [links]


def _last_rerun(links: list[Link]) -> Link | None:
    """The link furthest back that a resume runs again: an assignment in the interrupted iteration."""
    kept = [link for link in links if link.kind == "assign" and link.reruns and link.value is not None]
    return kept[-1] if kept else None


def _at(view: View, links: list[Link], template: str) -> str | None:
    """The source with the value made at the chain's origin rewritten by `template` (`{a}` its text as an atom):
    at the last link a resume runs again, or, for a value the interrupted loop takes from its iterable, a
    rebinding at the top of its body."""
    loop = interrupted_loop(view)
    last = links[-1] if links else None
    if last is not None and last.kind == "loop" and last.statement is loop and loop is not None:
        rebound = template.format(a=last.name)
        return edits.insert_before(view, loop.body[0], f"{last.name} = {rebound}")
    link = _last_rerun(links)
    if link is None or link.value is None:
        return None
    return make.wrap_node(view, link.value, template)


def _where(links: list[Link]) -> str:
    link = _last_rerun(links)
    if links and links[-1].kind == "loop":
        return f"where the loop takes `{links[-1].name}` from its iterable"
    return f"where `{link.name}` is made (line {link.statement.lineno} of the function)" if link else "where it is made"


# -- the kinds of fault ---------------------------------------------------------------------------------


def _cast(view: View, operand: Operand, names: list[str], target: str) -> Iterator[GeneratedRepair | None]:
    method = infer.CAST_METHODS.get(target)
    have = operand.facts.get("dtype")
    if method is None or not isinstance(have, str):
        return
    for name in names:
        facts = view.facts(name)
        if facts.get("dtype") != have or not infer.cast_keeps_values(have, target, facts.get("whole")):
            continue  # floats that are not all whole numbers: a cast to integers would change them
        for links in chains(view, name, lambda read: view.is_tensor(read) and view.facts(read).get("dtype") == have):
            code = _at(view, links, "{a}" + f".{method}()")
            yield make.changed(view, code, f"{operand.wrong or f'`{name}` is {have}'}. It is made {have} "
                               f"{_where(links)}: convert it to {target} there, so every use sees {target}.",
                               FAMILY, AT_ORIGIN)


def _offset(view: View, operand: Operand, names: list[str], count: int) -> Iterator[GeneratedRepair | None]:
    """`- 1` at the origin of labels numbered 1..count, when nothing on the way holds a 0."""
    def integer(read: str) -> bool:
        dtype = view.facts(read).get("dtype")
        return isinstance(dtype, str) and dtype.startswith(("int", "uint"))

    low, high = operand.facts.get("min"), operand.facts.get("max")
    carriers = [name for name in names if integer(name)]  # `labels[idx]`: the labels, not the index
    if low != 1 or high != count or len(carriers) != 1:
        return
    name = carriers[0]

    links = chain(view, name, integer)
    held = [_range(view.facts(link.name)) for link in links] + [_range(view.facts(r)) for link in links
                                                                  if link.value is not None
                                                                  for r in reads(link.value) if integer(r)]
    if any(found is not None and found[0] <= 0 for found in held):
        return  # a 0 among the values these labels come from: numbered from 0, so no offset
    wider = any(found is not None and found == (1, count) for found in held[1:])
    said = operand.wrong or f"`{name}` runs 1..{count}"
    yield make.changed(view, _at(view, links, "{a} - 1"),
                       f"{said}: the labels are numbered from 1. Number them from 0 {_where(links)}, so the loss "
                       f"and every other use (an accuracy, a lookup) see classes 0..{count - 1}.",
                       FAMILY, AT_ORIGIN if wider or _last_rerun(links) is not None else 2)


def _range(facts: dict[str, Any]) -> tuple[int, int] | None:
    low, high = facts.get("min"), facts.get("max")
    return (low, high) if isinstance(low, int) and isinstance(high, int) else None


def _integer(view: View, names: list[str]) -> Iterator[GeneratedRepair | None]:
    """`//` where a float that belongs to an int was divided, else `int(...)` where it was made; for a count
    whose division leaves a remainder, the count rounded up first (`repairbot.generate.counts`)."""
    for name in names:
        if view.type_of(name) != "float":
            continue
        remainder = counts.loses_remainder(view, name)
        down = ROUNDS_DOWN if remainder else ""
        links = chain(view, name, lambda read: view.type_of(read) == "float")
        for link in links:
            if link.kind != "assign" or not link.reruns or link.value is None:
                continue
            for node in ast.walk(link.value):
                if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                    made = (f"`{link.name}` is a float because it is computed with `/` (line "
                            f"{link.statement.lineno} of the function), and `{name}` is used as an int")
                    if remainder:
                        yield make.changed(view, counts.ceiling(view, node),
                                           f"{made}; it counts the iterations of a `range` and the division leaves "
                                           f"a remainder ({view.facts(name)['value']}): round it up there, so "
                                           "the last, partial batch is reached too.", FAMILY, AT_ORIGIN)
                    yield make.changed(view, edits.replace_between(view, node.left, node.right, "/", "//"),
                                       f"{made}: use `//` there.", FAMILY, AT_ORIGIN, down)
        last = _last_rerun(links)
        if last is not None and last.value is not None:
            yield make.changed(view, make.wrap_node(view, last.value, "int({})"),
                               f"Make `{last.name}` an int where it is computed, so `{name}` is one where it is used.",
                               FAMILY, 2, down)


def _data_size(view: View, operand: Operand, names: list[str], rows: int,
               sized_by: str) -> Iterator[GeneratedRepair | None]:
    """The configured size replaced by this iteration's data's in the statements the wrong tensor came from."""
    statement = view.statement
    assert statement is not None
    links = [link for link in slice_of(view, names, statement) if link.kind == "assign" and link.reruns]
    places = [(link.statement, link.value) for link in links if link.value is not None] + [(statement, statement)]
    for data in _data_names(view, rows):
        changes = []
        for where, value in places:
            bound = definition(view, data, where)
            if bound is None or not (bound.kind == "loop" or bound.reruns):
                continue  # the data is not bound yet where the size is used
            changes += [(node, f"{data}.size(0)") for node in _uses(view, value, sized_by)]
        if changes:
            yield make.changed(view, edits.replace(view, _outermost(changes)),
                               f"{operand.wrong or f'`{operand.expression}` has the configured rows'}: it is made "
                               f"with `{sized_by}` rows; this batch has {rows}. Size it from the data "
                               f"(`{data}.size(0)`), so a last, smaller batch fits.", FAMILY, AT_ORIGIN)


def _data_names(view: View, rows: int) -> list[str]:
    """Tensors of this iteration with `rows` rows, the loop's own targets first."""
    loop = interrupted_loop(view)
    targets = set(reads_target(loop)) if isinstance(loop, (ast.For, ast.AsyncFor)) else set()
    found = [name for name, variable in view.site.variables.items()
             if variable.type == "Tensor" and (variable.facts.get("shape") or [None])[0] == rows
             and view.assigned_in_iteration(name)]
    return sorted(found, key=lambda name: name not in targets)[:2]


def reads_target(loop: ast.For | ast.AsyncFor) -> list[str]:
    return [n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)]


def _uses(view: View, value: ast.AST, sized_by: str) -> list[ast.expr]:
    """The arguments (or items of tuple arguments) of calls in `value` written as `sized_by`."""
    found: list[ast.expr] = []
    for call in (n for n in ast.walk(value) if isinstance(n, ast.Call)):
        for argument in [*call.args, *(k.value for k in call.keywords)]:
            items = argument.elts if isinstance(argument, (ast.Tuple, ast.List)) else [argument]
            found += [item for item in items if isinstance(item, (ast.Name, ast.Attribute))
                      and edits.text(view, item) == sized_by]
    return found


def _outermost(changes: list[tuple[ast.expr, str]]) -> list[tuple[ast.expr, str]]:
    """Each node once."""
    seen: set[int] = set()
    kept = []
    for node, text in changes:
        if id(node) not in seen:
            seen.add(id(node))
            kept.append((node, text))
    return kept
