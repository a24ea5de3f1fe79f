"""Watching the iterations after an automatic repair.

A trial sees one iteration; the damage a repair does may show later. For the next few iterations
of the loop an automatic repair resumed (`ITERATIONS`), the run's health is read at the start of
each (`daifu.core.health`): non-finite values appearing in the trained state, or a new crash in
the same function whose statement reads what the repair changed (its *footprint*), are reported
against that repair — on the terminal and in the record — and automatic repairs at its site stop: a
later crash there goes to a person, or raises. A retry, or an action that binds no name (making a
folder, waiting), changes nothing a later statement reads, so a new crash is not its doing.

What a repair passes over is counted each time it fires (`daifu.core.account`), and the watch holds
the automatic repairs of a site to a budget (the `pass_over` setting; by default the crashed batch's
own samples, once; rows dropped from batches count by their number, `Budget.exceeded_by`): a firing
past it is stopped — a decision at a crash is refused, a surgery's
version is taken back so that the original statement runs again — automatic repairs at the site
stop, and the terminal says why (`passed_over`).
"""

from __future__ import annotations

import ast
import difflib
import os
import re
from collections.abc import Mapping
from types import FrameType
from typing import Any

from daifu.core import health
from daifu.core.account import Account, Budget, Firing, account_of, crashed_batch
from daifu.core.crash import Crash
from daifu.core.decisions import Action, Decision, Plays, Retry, Skip, Surgery
from daifu.core.handling import RepairEntry
from daifu.core.names import bound_names
from daifu.say import say
from daifu.state import RUN
from daifu.store import record

ITERATIONS = 3
_NAME = re.compile(r"[A-Za-z_]\w*")


class Watch:
    """The watch of one automatic repair: where it was, what the run held, iterations left."""

    def __init__(self, crash: Crash, number: int, decision: Decision) -> None:
        self.site = crash.site
        self.footprint = footprint(decision, crash)
        self.where = f"{os.path.basename(crash.filename)}:{crash.lineno}"
        self.number = number
        self.left = ITERATIONS
        self._globals = crash.globals
        self._used = set(_NAME.findall(crash.source))
        self.before = health.inventory(self._view(dict(crash.locals)))

    def _view(self, local_values: Mapping[str, Any]) -> dict[str, Any]:
        values = {name: self._globals[name] for name in self._used if name in self._globals}
        values.update(local_values)
        return values

    def __call__(self, frame: FrameType) -> bool:
        """At the start of an iteration: whether to go on watching."""
        if self.left <= 0:
            return False
        self.left -= 1
        found = health.examine(self.before, self._view(frame.f_locals))
        if found.spoilt:
            self.failed(f"non-finite values in {', '.join(found.spoilt[:3])}")
            return False
        if self.left == 0:
            RUN.watches.pop(self.site[0], None)
        return self.left > 0

    def failed(self, what: str) -> None:
        """Report `what` against the repair, and stop automatic repairs at its site."""
        self.left = 0
        RUN.watches.pop(self.site[0], None)
        RUN.distrusted.add(self.site)
        message = (
            f"repair {self.number} at {self.where} was followed by {what}: "
            "no more automatic repairs there (a person decides, or the crash raises)"
        )
        say(message)
        record.note(message)


def start(crash: Crash, number: int, decision: Decision, pass_over: str = "batch") -> Watch:
    """Watch the iterations after the automatic repair of `crash` (repair `number`, `decision`): the
    runtime calls the watch returned at the start of each (`RepairContext.watch`). The first automatic
    repair of a site sets the budget of what its repairs may pass over (`pass_over`, the setting); a
    repeated crash there spends the same one."""
    watch = Watch(crash, number, decision)
    RUN.watches[crash.qualname] = watch
    account = account_of(crash.site, watch.where)
    if account.budget is None:
        account.budget = budget(crash, pass_over)
    return watch


def budget(crash: Crash, pass_over: str) -> Budget:
    """The budget of the automatic repairs of `crash`'s site under the `pass_over` setting."""
    if pass_over == "unlimited":
        return Budget(None, None, "unlimited")
    if pass_over.isdigit():
        return Budget(int(pass_over), None, f"{pass_over} samples")
    samples = crashed_batch(crash.source, crash.first_lineno, crash.lineno, crash.locals)
    if samples is None:
        return Budget(None, 1, "the crashed batch, once (its samples cannot be told)")
    return Budget(samples, 1, f"the crashed batch's {samples} samples, once")


def passed_over(account: Account, firing: Firing, entry: RepairEntry | None) -> str | None:
    """A repair is about to pass over work (`Handling.passed_over`): within its site's budget (or with
    none, no automatic repair being watched there) it is counted and recorded, and `None` lets it go
    on; past the budget, automatic repairs at the site stop, the terminal and the record say why,
    and the reason is returned (the runtime then stops the firing)."""
    limit = account.budget
    if limit is not None and limit.exceeded_by(account, firing):
        return _over_budget(account, firing, limit)
    account.add(firing)
    record.passed_over(account, firing, entry)
    return None


def _over_budget(account: Account, firing: Firing, limit: Budget) -> str:
    number = account.repairs[-1] if account.repairs else "?"
    spent = account.describe() if account.firings else "passed over nothing yet"
    reason = (f"repair {number} at {account.where} would pass over more than its budget ({limit.text}) "
              f"with {firing.what} once more: it {spent}")
    RUN.watches.pop(account.site[0], None)
    RUN.distrusted.add(account.site)
    message = f"{reason}; no more automatic repairs there (a person decides, or the crash raises)"
    say(message)
    record.note(message)
    return reason


def new_crash(crash: Crash) -> None:
    """A crash elsewhere in a function whose last automatic repair is still watched: report it
    against that repair. (The same crash at the same site on new data is not the repair's doing;
    the same crash with no progress is counted by the runtime's attempts.)"""
    watch = RUN.watches.get(crash.qualname)
    if not isinstance(watch, Watch) or watch.left <= 0 or crash.site == watch.site:
        return
    if watch.footprint is not None and not watch.footprint & set(_NAME.findall(crash.statement)):
        return  # the new crash reads nothing the repair changed
    watch.failed(f"a new crash, {crash.exception_type} at {os.path.basename(crash.filename)}:{crash.lineno}")


def distrusted(crash: Crash) -> bool:
    """Whether automatic repairs at this crash's site were stopped."""
    return crash.site in RUN.distrusted


def footprint(decision: Decision, crash: Crash) -> frozenset[str] | None:
    """The names `decision` may have changed for later statements; `None` when it cannot be told
    (a skipped iteration, a patched callee): then any new crash is counted against it."""
    if isinstance(decision, Retry):
        return frozenset()
    if isinstance(decision, Action):
        return _bound(decision.code)
    if isinstance(decision, Skip):
        return frozenset(_NAME.findall(crash.statement))  # what the skipped statement would have set
    if isinstance(decision, Surgery):
        changed = difflib.ndiff(crash.source.splitlines(), decision.source.splitlines())
        return frozenset(name for line in changed if line[:2] in ("- ", "+ ") for name in _NAME.findall(line[2:]))
    if isinstance(decision, Plays):
        parts = [footprint(step, crash) for step in decision.steps]
        return None if None in parts else frozenset(name for part in parts if part for name in part)
    return None


def _bound(code: str) -> frozenset[str] | None:
    """The names an action's code binds, or whose objects it changes (`x.attr = ...`, `x[i] = ...`)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    names = bound_names(tree, nested=True)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, (ast.Store, ast.Del)):
            base: ast.expr = node
            while isinstance(base, (ast.Attribute, ast.Subscript)):
                base = base.value
            if isinstance(base, ast.Name):
                names.add(base.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
            names.add(node.func.value.id)  # a method may change its object in place: `model.half()`
    return frozenset(names - {name for name in names if name.startswith("_daifu")})
