"""A distribution's argument outside its constraint, mapped into it.

`torch.distributions` validates its arguments: "Expected parameter probs (Tensor of shape (2,)) of
distribution Categorical(...) to satisfy the constraint Simplex(), but found invalid values". The
argument is found in the statement (by keyword, or as the only positional argument of the call to
that distribution) and mapped into the constraint the way PyTorch's own `transform_to` registry does:
`softmax(-1)` onto the simplex, `exp()` onto the positive reals, `sigmoid()` onto the unit interval.
For `probs`, the same values given as `logits=` describe the distribution a softmax would (the
distributions that take `probs` take `logits` too).

Invalid values that are NaN are not a parameter in the wrong space but bad data: `control` skips them.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from repairbot.generate import edits, make
from repairbot.generate.candidate import GeneratedRepair
from repairbot.generate.view import View

FAMILY = "constraints"
_VIOLATION = re.compile(
    r"Expected parameter (\w+) .*? of distribution (\w+)\(.*?to satisfy the constraint (\w+)\(",
    re.IGNORECASE,
)
_INTO = {"Simplex": ".softmax(-1)", "GreaterThan": ".exp()", "Positive": ".exp()", "UnitInterval": ".sigmoid()",
         "HalfOpenInterval": ".sigmoid()"}


def propose(view: View) -> Iterator[GeneratedRepair | None]:
    found = view.says(_VIOLATION)
    if view.statement is None or not found or view.says(r"found invalid values:\s*tensor\(\[?\s*nan"):
        return
    parameter, distribution, constraint = found.groups()
    for call in make.calls(view):
        if make.name_of(call.func) != distribution:
            continue
        keyword = next((k for k in call.keywords if k.arg == parameter), None)
        node = keyword.value if keyword else (call.args[0] if len(call.args) == 1 and not call.keywords else None)
        if node is None:
            continue
        if parameter == "probs":
            new = "logits=" + edits.text(view, node)
            target: ast.AST = keyword if keyword is not None else node
            yield make.changed(view, edits.replace(view, [(target, new)]),
                               f"These values are not probabilities ({constraint} fails): they are scores; give them "
                               f"to {distribution} as `logits=`.", FAMILY, 2)
        mapped = _INTO.get(constraint)
        if mapped:
            yield make.changed(view, make.wrap_node(view, node, "{a}" + mapped),
                               f"Map `{edits.text(view, node)}` onto the {constraint} constraint of {distribution}'s "
                               f"`{parameter}` with `{mapped[1:]}`.", FAMILY, 1)
