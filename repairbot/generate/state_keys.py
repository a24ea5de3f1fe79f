"""A state dict whose keys carry (or lack) a wrapper's prefix: the keys renamed as they are loaded.

A model saved from `nn.DataParallel` or `DistributedDataParallel` has every key under `module.`, one
saved from `torch.compile`'s wrapper under `_orig_mod.`; loaded into the bare model (or a bare model's
state into a wrapped one), `load_state_dict` refuses it, naming the keys it missed and the keys it did
not expect. Where removing one dotted prefix from every unexpected key gives exactly the missing keys
(or adding one to them), the dict is the model's own state under another name: the argument of
`load_state_dict` is rewritten with the prefix removed (or added) as it is loaded. `strict` stays as
it was, so a remapping that is not complete (a message cut short) raises again in its trial instead
of loading nothing, which is what `strict=False`, the usual wrong answer, does silently.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from repairbot.generate import edits, make
from repairbot.generate.candidate import GeneratedRepair
from repairbot.generate.view import View

FAMILY = "state_keys"
_REFUSED = re.compile(r"Error\(s\) in loading state_dict", re.IGNORECASE)
_KEYS = r"{} key\(s\) in state_dict:([^\n]*)"


def propose(view: View) -> Iterator[GeneratedRepair | None]:
    if view.statement is None or not view.says(_REFUSED):
        return
    missing, unexpected = _keys(view, "Missing"), _keys(view, "Unexpected")
    if not missing or not unexpected or view.says(r"size mismatch"):
        return
    renamed = _renaming(missing, unexpected, cut=view.message.rstrip().endswith("..."))
    if renamed is None:
        return
    template, said, complete = renamed
    for call in (n for n in view.walk() if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                 and n.func.attr == "load_state_dict"):
        loaded = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "state_dict"), None)
        if loaded is None:
            continue
        items = f"{edits.atom(view, loaded)}.items()"
        yield make.changed(view, edits.replace(view, [(loaded, "{" + template + f": v for k, v in {items}}}")]),
                           f"The state dict's keys {said} (a model saved from a wrapper such as DataParallel or "
                           "torch.compile, or into one); rename them as they are loaded, so every key finds its "
                           "tensor.", FAMILY, 3 if complete else 1)


def _keys(view: View, which: str) -> list[str]:
    found = view.says(_KEYS.format(which))
    return re.findall(r'"([^"]*)"', found.group(1)) if found else []


def _renaming(missing: list[str], unexpected: list[str], cut: bool) -> tuple[str, str, bool] | None:
    """The comprehension key template that maps the unexpected keys onto the missing ones, what it does in
    words, and whether the two lists matched exactly (`cut`: the report cut the message short, so the list
    named last, the unexpected keys, may end early)."""
    for prefix in _prefixes(unexpected[0]):
        if all(key.startswith(prefix) for key in unexpected):
            match = _matches({key[len(prefix):] for key in unexpected}, set(missing), cut)
            if match is not None:
                return f"k.removeprefix({prefix!r})", f"carry the prefix {prefix!r} the model's do not", match
    for prefix in _prefixes(missing[0]):
        if all(key.startswith(prefix) for key in missing):
            match = _matches(set(unexpected), {key[len(prefix):] for key in missing}, cut)
            if match is not None:
                return f"{prefix!r} + k", f"lack the prefix {prefix!r} the model's carry", match
    return None


def _prefixes(key: str) -> list[str]:
    """The dotted prefixes of `key`, shortest first: `module.`, `module._orig_mod.` of `module._orig_mod.fc.w`."""
    parts = key.split(".")
    return [".".join(parts[:i]) + "." for i in range(1, len(parts))]


def _matches(renamed: set[str], wanted: set[str], cut: bool) -> bool | None:
    """`True` when the renamed unexpected keys are the missing ones; `False` when they are some of them and
    the message was cut short; else `None`."""
    if renamed == wanted:
        return True
    return False if cut and renamed < wanted else None
