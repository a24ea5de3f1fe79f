"""What a repair gives up, estimated from what it is: its kind and its edit, before any trial.

Both ends rank by it: the generator orders its candidates with the message rules' suggestions
(`repairbot.generate.rank`), and the training process orders whatever a bot answered — a language
model's suggestions included, whose confidence says nothing of what they give up — before it tries
them (`daifu.decide.giving_up`). The levels, least given up first:

- `NOTHING`: the repair changes a value (an edit, a cast, a key, a retry): no work is passed over;
- `REPORT`: it skips a statement that only reports (a line of the log is lost, no trained state);
- `ROWS`: it drops rows of a batch (or replaces some of their values): part of one batch;
- `ITERATION`: it passes over an item or the rest of an iteration (a `skip_iteration`, a `continue`,
  `break` or `return` its edit introduces, the skip of a statement run for its effect);
- `STATEMENT`: it skips a statement that assigns (its names keep stale values, which no trial can judge);
- `STATE`: it discards trained state (a layer or an optimizer made anew).

The estimate reads only the syntax tree of the code: an edit that hides a jump or a filter the tree
does not show is caught by its trial, which counts what the repair passed over where it fired
(`daifu.core.horizon`). Nothing here runs code.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections import Counter

from repairbot import parsing

NOTHING, REPORT, ROWS, ITERATION, STATEMENT, STATE = range(6)
NAMES = ("nothing", "a statement that only reports", "rows of a batch", "an iteration",
         "a statement that assigns", "trained state")
"""Each level in words, by its number."""

REPORTERS = ("logging.", "tqdm.", "torch.utils.tensorboard.", "tensorboardX.", "wandb.", "mlflow.", "_io.")
"""Module prefixes of the classes whose methods only report: loggers, progress bars, metric boards, text
streams. A receiver is known by its live value's class, never by its name."""
REPORTING_MODULES = frozenset({"logging", "warnings"})
"""Modules whose functions only report, called through the module's own name (`logging.info(...)`)."""

_NEW_STATE = re.compile(r"\b(?:nn|torch\.nn)\.[A-Z]\w*\(|\b(?:optim|torch\.optim)\.[A-Z]\w*\(|\.add_param_group\(")
_JUMPS = (ast.Continue, ast.Break, ast.Return)


def of_code(kind: str, code: str, old_source: str | None) -> int:
    """The level `kind` with `code` gives up (see the module docstring). `old_source`: the code a surgery or
    a patch replaces, against which only what the edit adds counts (`None`: unknown; a patch then counts as
    changing values, since a whole new `def` of unknown origin tells nothing by its `return`s). A `skip` is
    taken to skip a statement that assigns: whether its statement only reports is known only from its
    live values (`repairbot.generate.site_control`, `daifu.decide.giving_up`)."""
    if kind == "skip_iteration":
        return ITERATION
    if kind == "skip":
        return STATEMENT
    if kind not in ("action", "surgery", "patch_function"):
        return NOTHING
    new = _parse(code)
    if new is None:
        return NOTHING
    old = _parse(old_source) if old_source is not None and kind != "action" else None
    if kind == "patch_function" and old is None:
        return NOTHING
    old_lines = {line.strip() for line in (old_source or "").splitlines()} if old is not None else set()
    if any(_NEW_STATE.search(line) and line.strip() not in old_lines for line in code.splitlines()):
        return STATE
    if old is not None and _count(new, _JUMPS) > _count(old, _JUMPS):
        return ITERATION
    if _drops_rows(_added_statements(new, old)):
        return ROWS
    return NOTHING


def _parse(code: str | None) -> ast.Module | None:
    try:
        return parsing.parse(textwrap.dedent(code or ""))
    except parsing.REFUSED:
        return None


def _count(tree: ast.AST, kinds: tuple[type[ast.AST], ...]) -> int:
    return sum(1 for node in ast.walk(tree) if isinstance(node, kinds))


def _added_statements(new: ast.Module, old: ast.Module | None) -> list[ast.stmt]:
    """The simple statements of `new` that `old` does not hold (all of them without `old`)."""
    kept = Counter(ast.dump(s) for s in ast.walk(old) if isinstance(s, ast.stmt)) if old is not None else Counter()
    added = []
    for statement in (s for s in ast.walk(new) if isinstance(s, ast.stmt)):
        dump = ast.dump(statement)
        if kept[dump]:
            kept[dump] -= 1
        else:
            added.append(statement)
    return added


def _drops_rows(statements: list[ast.stmt]) -> bool:
    """Whether one of `statements` rebinds a name to a part of itself cut by a mask, an index list or a
    slice (`x = x[keep]`, `x, y = x[:n], y[:n]`); an item picked by a constant (`out = out[0]`) is a
    structure's element, not rows."""
    for statement in statements:
        if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
            continue
        target, value = statement.targets[0], statement.value
        pairs = (list(zip(target.elts, value.elts)) if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple)
                 and len(target.elts) == len(value.elts) else [(target, value)])
        if any(_cut_from_itself(t, v) for t, v in pairs):
            return True
    return False


def _cut_from_itself(target: ast.expr, value: ast.expr) -> bool:
    if not (isinstance(target, ast.Name) and isinstance(value, ast.Subscript)):
        return False
    if not (isinstance(value.value, ast.Name) and value.value.id == target.id):
        return False
    index = value.slice
    constant = index.operand if isinstance(index, ast.UnaryOp) else index
    return not isinstance(constant, ast.Constant)
