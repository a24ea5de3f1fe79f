"""A candidate repair, what it costs, and what it gives up.

Candidates come from the families of edits (`repairbot.generate.*`) and from the message rules
(`repairbot.rules`); both are ranked together (`repairbot.generate.rank`) by the same measures:

- `evidence`: how firmly the crash's facts point at this edit — 2 when the facts determine it (the
  shapes multiply out, the dtype is the one the other operand has), 1 when it is a plausible reading
  of the crash, 0 for a guess worth one trial;
- `cost`: the syntax nodes the edit adds or removes (`x` -> `x.float()` is 2), and `new_names`, the
  names it brings into the function;
- `gives_up`: what the repair loses, said in its explanation: a line of the log, rows of a batch, the
  rest of an iteration, the trained state. Such candidates are ranked after every one that loses
  nothing, the smaller loss first (`repairbot.giving_up`).
"""

from __future__ import annotations

import ast
import builtins
import textwrap
from collections import Counter
from dataclasses import dataclass

from repairbot.protocol import Suggestion
from repairbot.signs import parse

SKIPS_ITERATION = "skips the rest of this iteration (its batch is not trained on)"
SKIPS_STATEMENT = "skips the faulty statement (the names it assigns keep their old values)"
SKIPS_REPORT = "skips a statement that only reports (a line of the log is lost, no trained state)"
PASSES_ITEM = "passes over the item the loop's iterator could not make (a batch is not trained on)"
ROUNDS_DOWN = "rounds the count down (the items of the remainder, past the last whole batch, are never reached)"
DROPS_ELEMENTS = "drops the elements that do not match"
CUTS_SEQUENCES = "cuts the sequences longer than the batch's others to their length (their last ids are not read)"
REPLACES_DATA = "replaces the out-of-range values of this batch by 0 (conventionally the unknown or padding id)"
REPLACES_NONFINITE = "replaces the NaN and Inf values of this iteration's data by 0"
CUTS_ROWS = "leaves rows of a batch out (it rebinds a name to a part of itself)"
IGNORES_UNLABELED = "leaves the rows labelled -1 (no label) out of the loss (`ignore_index`)"
INTRODUCES_JUMP = "passes over work where the `continue`, `break` or `return` it introduces runs"
DISCARDS_STATE = "discards trained state (a layer or an optimizer is made anew)"
_BUILTINS = frozenset(dir(builtins))


@dataclass
class GeneratedRepair:
    """One repair as proposed, before ranking (see the module docstring)."""

    kind: str
    explanation: str
    family: str
    evidence: int = 1
    code: str = ""
    target: str | None = None
    gives_up: str = ""
    confidence: float | None = None
    cost: int = 0
    new_names: int = 0

    def suggestion(self) -> Suggestion:
        explanation = self.explanation
        if self.gives_up:
            explanation += f" Last resort: it {self.gives_up}."
        confidence = self.confidence if self.confidence is not None else (0.45 + 0.2 * self.evidence)
        if self.gives_up:
            confidence = min(confidence, 0.3)
        return Suggestion(kind=self.kind, code=self.code, target=self.target, explanation=explanation,  # type: ignore[arg-type]
                          confidence=round(max(0.05, min(confidence, 0.95)), 3), origin="rules")


def measure(candidate: GeneratedRepair, old_source: str | None, known: set[str]) -> GeneratedRepair:
    """`candidate` with its cost and new names worked out from its code: a surgery against the running
    source, an action as a whole; `known` are the names the crash already has (its live values)."""
    if candidate.kind in ("retry", "skip", "skip_iteration"):
        candidate.cost, candidate.new_names = 0, 0
        return candidate
    new_tree = parse(textwrap.dedent(candidate.code))
    if new_tree is None:
        candidate.cost = 10**6
        return candidate
    old_tree = parse(textwrap.dedent(old_source)) if old_source and candidate.kind != "action" else None
    new_nodes = _signatures(new_tree)
    if old_tree is None:
        candidate.cost = sum(new_nodes.values())
    else:
        old_nodes = _signatures(old_tree)
        candidate.cost = sum((new_nodes - old_nodes).values()) + sum((old_nodes - new_nodes).values())
        known = known | _names(old_tree)
    imported = {(a.asname or a.name).split(".")[0] for n in ast.walk(new_tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names}
    fresh = {name for name in _names(new_tree) - known - imported - _BUILTINS if not name.startswith("_daifu")}
    candidate.new_names = len(fresh)
    return candidate


def _signatures(tree: ast.AST) -> Counter[str]:
    """Each node by its type and what it names, without positions: the multiset an edit changes."""
    found: Counter[str] = Counter()
    for node in ast.walk(tree):
        if isinstance(node, (ast.expr_context, ast.Module, ast.Import, ast.ImportFrom, ast.alias, ast.Delete)):
            continue
        found[_signature(node)] += 1
    return found


def _signature(node: ast.AST) -> str:
    name = type(node).__name__
    if isinstance(node, ast.Name):
        return f"{name}:{node.id}"
    if isinstance(node, ast.Attribute):
        return f"{name}:{node.attr}"
    if isinstance(node, ast.Constant):
        return f"{name}:{node.value!r}"
    if isinstance(node, ast.keyword):
        return f"{name}:{node.arg}"
    if isinstance(node, ast.arg):
        return f"{name}:{node.arg}"
    return name


def _names(tree: ast.AST) -> set[str]:
    found = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    return found | {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
