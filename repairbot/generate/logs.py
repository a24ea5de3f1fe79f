"""A NaN or Inf made by `log` of a tensor that holds zeros: the log taken of the values kept above 0.

Probabilities from a sharpened softmax underflow to exactly 0; `torch.log(p)` is then -inf, and
`p * torch.log(p)` (an entropy) is `0 * -inf`, NaN. The crash comes later — a finiteness check on
the loss, an optimizer step — and only shows the non-finite value. From the statement's non-finite
tensors this family follows the def-use chains (`repairbot.generate.trace.slice_of`) back through the
statements the resume runs again, and where one takes `log` of a name whose live values reach 0 and
none below (`min == 0`), it proposes the log of those values clamped to the smallest positive normal
number of their dtype: a zero's term of an entropy becomes 0 (its limit), and the gradient stays
finite (the clamp passes none to the clamped values, where `torch.xlogy` would give NaN).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from repairbot.generate import edits, make
from repairbot.generate.candidate import GeneratedRepair
from repairbot.generate.origin import AT_ORIGIN
from repairbot.generate.trace import slice_of
from repairbot.generate.view import View

FAMILY = "logs"
_LOGS = frozenset({"log", "log2", "log10"})


def propose(view: View) -> Iterator[GeneratedRepair | None]:
    statement = view.statement
    if statement is None or not view.outermost:
        return
    poisoned = [n for n in view.reads if view.is_tensor(n) and (view.facts(n).get("nan") or view.facts(n).get("inf"))]
    if not poisoned:
        return
    for made in _makers(view, poisoned, statement):
        found = _logs_of_zero(view, made.value)
        if found:
            names = ", ".join(sorted({f"`{name}`" for _, name in found}))
            yield make.changed(view, edits.replace(view, [(call, _clamped(view, call, name)) for call, name in found]),
                               f"{names} holds zeros (its smallest value is 0) and its log is -inf, which makes the "
                               f"value of line {made.lineno} of the function non-finite: take the log of the values "
                               "clamped to the smallest positive number of their dtype, so a zero's term is 0, its "
                               "limit.", FAMILY, AT_ORIGIN)


def _makers(view: View, names: list[str], statement: ast.stmt) -> list[ast.Assign]:
    """The assignments the resume runs again that `names` came from: the def-use slice's, and where the slice
    stops at an `if` that binds one of them (which branch ran is not in the report), those in its branches."""
    found: list[ast.Assign] = []
    for link in slice_of(view, names, statement):
        if not link.reruns:
            continue
        if link.kind == "assign" and isinstance(link.statement, ast.Assign):
            found.append(link.statement)
        elif isinstance(link.statement, ast.If):
            found += [s for s in ast.walk(link.statement) if isinstance(s, ast.Assign)]
    return list(dict.fromkeys(found))


def _logs_of_zero(view: View, value: ast.expr) -> list[tuple[ast.Call, str]]:
    """The calls `torch.log(x)` / `x.log()` in `value` whose `x` is a name of a tensor holding 0 and nothing less."""
    found = []
    for node in ast.walk(value):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute) or node.func.attr not in _LOGS:
            continue
        receiver = node.func.value
        argument = (node.args[0] if len(node.args) == 1 and not node.keywords
                    and isinstance(receiver, ast.Name) and receiver.id == "torch" else None)
        operand = argument if argument is not None else (receiver if not node.args and not node.keywords else None)
        if isinstance(operand, ast.Name) and view.is_tensor(operand.id) and view.facts(operand.id).get("min") == 0:
            found.append((node, operand.id))
    return found


def _clamped(view: View, call: ast.Call, name: str) -> str:
    kept = f"{name}.clamp_min(torch.finfo({name}.dtype).tiny)"
    assert isinstance(call.func, ast.Attribute)
    if call.args:
        return f"{edits.text(view, call.func)}({kept})"
    return f"{kept}.{call.func.attr}()"
