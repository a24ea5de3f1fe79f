"""Exceptional data: a batch or a loss with NaN or Inf in it."""

from __future__ import annotations

import ast

from repairbot.protocol import Suggestion
from repairbot.rules.context import ReportView, Finding, present, search, skip
from repairbot.rules.edit import in_loop, replace_with, statement_node

_NONFINITE = r"\bnan\b|\binf\b|non-?finite|not finite|isfinite|isnan"


def nonfinite(ctx: ReportView) -> Finding | None:
    """Skip what NaN or Inf poisoned; a guard in a loop becomes `continue`, so later bad batches pass too."""
    poisoned = [n for n, f in ctx.tensors() if f.get("nan") or f.get("inf")]
    if not poisoned and not search(_NONFINITE, ctx.message):
        return None
    where = f" in {', '.join(f'`{n}`' for n in poisoned)}" if poisoned else ""
    return Finding(
        "exceptional_data",
        f"The data or the loss holds NaN or Inf{where}; training on it would spoil "
        "the weights, so what holds them (the rows, or else the batch) is best left out.",
        present(
            _guard_to_continue(ctx), skip("Pass over the faulty statement this time.", 0.6 if _is_guard(ctx) else 0.45)
        ),
    )


def _is_guard(ctx: ReportView) -> bool:
    return isinstance(statement_node(ctx.statement), (ast.Raise, ast.Assert))


def _guard_to_continue(ctx: ReportView) -> Suggestion | None:
    f = ctx.report.function
    if not ctx.at_function or not _is_guard(ctx) or not in_loop(f.source, f.first_lineno, f.lineno):
        return None
    node = statement_node(ctx.statement)
    if isinstance(node, ast.Assert):
        try:
            text = f"if not ({ast.unparse(node.test)}):\n    continue"
        except RecursionError:  # a test nested deeper than unparse can recurse
            return None
    else:
        text = "continue"
    return ctx.edit(
        replace_with(text),
        "Turn the check into `continue`: this batch and any later non-finite one "
        "are passed over instead of stopping the run.",
        0.8,
    )


RULES = [nonfinite]
