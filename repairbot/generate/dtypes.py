"""Dtype casts: each operand of the wrong dtype converted to the dtype its partner needs.

Evidence, from firmest: a floating tensor (or a tuple of them, an LSTM's state) passed to a module
whose parameters have another floating dtype (float64 NumPy data into a float32 model) wants the
module's dtype; a tensor of a dtype the message names wants the other dtype it names, firmly when
its partner in the statement has that dtype ("expected scalar type Long but found Float" for float
labels); operands of mixed floating dtypes want the majority's. Each cast is proposed where the
statement uses the tensor (`x.float()`) and where it was computed a line up (`x = torch.from_numpy(a).float()`).
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

from repairbot.generate import infer, make
from repairbot.generate.candidate import GeneratedRepair
from repairbot.generate.view import View

FAMILY = "dtypes"
_WORDS = {
    "Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16", "Long": "int64",
    "Int": "int32", "Short": "int16", "Bool": "bool", "Byte": "uint8",
    **{name: name for name in ("float16", "float32", "float64", "bfloat16", "int8", "int16", "int32", "int64", "uint8")},
}
_MENTION = re.compile(r"\b(?:torch\.)?(" + "|".join(sorted(_WORDS, key=len, reverse=True)) + r")\b")
"""PyTorch's names of dtypes, as its messages write them (capitalised, or with their width): Python's own
messages say `int` and `float` for Python's types, which are no dtype."""


def propose(view: View) -> Iterator[GeneratedRepair | None]:
    if view.statement is None or not view.exception_types & {"RuntimeError", "TypeError", "ValueError"}:
        return
    operands = _operands(view)
    if not operands:
        return
    named = _mentioned(view)
    floating = Counter(d for dtypes in operands.values() for d in dtypes if infer.floating(d))
    wanted: dict[tuple[str, str], int] = {}
    for name, dtypes in operands.items():
        for target in _module_dtypes(view, name):
            for have in dtypes:
                if infer.floating(have) and have != target:
                    wanted[(name, target)] = max(wanted.get((name, target), 0), 2)
        for have in dtypes:
            if have in named:
                for target in named:
                    if target != have:
                        partner = any(target in d for other, d in operands.items() if other != name)
                        wanted[(name, target)] = max(wanted.get((name, target), 0), 2 if partner else 1)
        if len(floating) > 1 and not named and not make.module_calls(view):  # a module's dtype decides, above
            majority = floating.most_common(1)[0][0]
            if any(infer.floating(d) and d != majority for d in dtypes):
                wanted.setdefault((name, majority), 1)
    for (name, target), evidence in wanted.items():
        yield from _casts(view, name, target, evidence)


def _operands(view: View) -> dict[str, list[str]]:
    """The dtypes of each tensor the statement reads (a tuple's: its tensor items')."""
    found: dict[str, list[str]] = {}
    for name in view.reads:
        facts = view.facts(name)
        if view.is_tensor(name) and isinstance(facts.get("dtype"), str):
            found[name] = [facts["dtype"]]
        elif isinstance(facts.get("items"), list) and view.type_of(name) in ("tuple", "list"):
            dtypes = [item["dtype"] for item in facts["items"] if isinstance(item, dict) and isinstance(item.get("dtype"), str)]
            if dtypes:
                found[name] = dtypes
    return found


def _module_dtypes(view: View, name: str) -> list[str]:
    """The floating dtypes of the modules the statement calls with `name` among the arguments."""
    found = []
    for call in make.module_calls(view):
        module = call.func.id  # type: ignore[attr-defined]
        passed = {n.id for a in [*call.args, *(k.value for k in call.keywords)] for n in ast.walk(a) if isinstance(n, ast.Name)}
        dtype = view.facts(module).get("dtype")
        if name in passed and isinstance(dtype, str) and infer.floating(dtype):
            found.append(dtype)
    return found


def _mentioned(view: View) -> list[str]:
    return list(dict.fromkeys(_WORDS[m.group(1)] for m in _MENTION.finditer(view.message)))


def _casts(view: View, name: str, target: str, evidence: int) -> Iterator[GeneratedRepair | None]:
    method = infer.CAST_METHODS.get(target)
    if method is None:
        return
    facts: dict[str, Any] = view.facts(name)
    if view.is_tensor(name):
        if not infer.cast_keeps_values(facts.get("dtype"), target, facts.get("whole")):
            return  # floats that are not all whole numbers: a cast to integers would change them
        why = f"`{name}` is {facts.get('dtype')}; convert it to {target} with `.{method}()`"
        assignment = view.earlier_assignment(name)
        if assignment is not None and assignment.value is not None:
            yield make.changed(view, make.wrap_node(view, assignment.value, "{a}" + f".{method}()"),
                               f"{why} where it is computed.", FAMILY, evidence)
        yield make.changed(view, make.wrap_reads(view, name, "{}" + f".{method}()"), f"{why} where it is used.",
                           FAMILY, evidence)
        yield make.action(view, f"{name} = {name}.{method}()", f"{why}, then run the statement again.", FAMILY,
                          max(0, evidence - 1))
    elif infer.floating(target) or target == "bool":  # every item keeps its values
        item = view.fresh("t")
        template = f"tuple({item}.{method}() for {item} in {{}})"
        yield make.changed(view, make.wrap_reads(view, name, template),
                           f"`{name}` holds tensors of another dtype; convert each to {target}.", FAMILY, evidence)
    else:
        yield from _whole_items_cast(view, name, target, method, facts, evidence)


def _whole_items_cast(view: View, name: str, target: str, method: str, facts: dict[str, Any],
                      evidence: int) -> Iterator[GeneratedRepair | None]:
    """To an integer dtype, a tuple's floating items that hold whole numbers only (category codes read from
    a table of floats), the others as they are: casting every item would truncate the real-valued ones.
    Nothing when an item is not described or no item is whole."""
    items = facts.get("items")
    if not isinstance(items, list) or len(items) != facts.get("len"):
        return
    cast = [isinstance(item, dict) and infer.floating(item.get("dtype"))
            and infer.cast_keeps_values(item.get("dtype"), target, item.get("whole")) for item in items]
    if not any(cast):
        return
    parts = [f"{{0}}[{index}].{method}()" if whole else f"{{0}}[{index}]" for index, whole in enumerate(cast)]
    template = "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
    which = ", ".join(str(index) for index, whole in enumerate(cast) if whole)
    yield make.changed(view, make.wrap_reads(view, name, template),
                       f"`{name}`'s items {which} are floats holding whole numbers; convert them to {target} "
                       "(the others keep their values).", FAMILY, evidence)
