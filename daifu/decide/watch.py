"""Watching the iterations after an automatic repair.

A trial sees one iteration; the damage a repair does may show later. For the next few iterations
of the loop an automatic repair resumed (`ITERATIONS`), the run's health is read at the start of
each (`daifu.core.health`): non-finite values appearing in the trained state, or a new crash in
the same function whose statement reads what the repair changed (its *footprint*), are reported
against that repair — on the terminal and in the record — and automatic repairs at its site stop: a
later crash there goes to a person, or raises. A retry, or an action that binds no name (making a
folder, waiting), changes nothing a later statement reads, so a new crash is not its doing.
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
from daifu.core.crash import Crash
from daifu.core.decisions import Action, Decision, Plays, Retry, Skip, Surgery
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


def start(crash: Crash, number: int, decision: Decision) -> Watch:
    """Watch the iterations after the automatic repair of `crash` (repair `number`, `decision`): the
    runtime calls the watch returned at the start of each (`RepairContext.watch`)."""
    watch = Watch(crash, number, decision)
    RUN.watches[crash.qualname] = watch
    return watch


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
