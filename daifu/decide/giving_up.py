"""What a candidate repair gives up, as the training process orders and chooses by it.

Before any trial, each candidate gets the level its kind and its code show (`repairbot.giving_up`:
a changed value, the skip of a statement that only reports, rows of a batch, an iteration, the skip of
a statement that assigns, trained state), read against the crash itself: a surgery's new `def` against
the running source, a skip against the faulty statement and its live values (a `print`, a logger's or a
progress bar's call only reports). Candidates are tried in that order (`daifu.decide.candidates.rank`),
whatever the bot said of them: a language model's confidence says nothing of what a repair gives up.

Once a trial ran, what it measured counts (`given_up`): the iterations of its horizon in which the
repair passed over work and the rows it dropped (`daifu.core.horizon`). An edit that looked like a change
of value but passed over work in its trial is what it did, not what it looked like; the verification
stage then looks on for a candidate that gives up less (`Verification.first_passing`).
"""

from __future__ import annotations

import ast
import textwrap
from types import ModuleType

from daifu.core.crash import Crash
from daifu.core.decisions import Action, Decision, Skip, SkipIteration, Surgery
from daifu.core.horizon import missing_steps, passing_over, planned_steps
from daifu.core.kinds import code_of, wire_kind
from daifu.core.trial import Verdict
from repairbot import giving_up
from repairbot.giving_up import (
    ITERATION,
    NOTHING,
    REPORT,
    REPORTERS,
    REPORTING_MODULES,
    ROWS,
    STATEMENT,
)

NAMES = giving_up.NAMES
"""Each level in words (`repairbot.giving_up.NAMES`), for the terminal."""

GivenUp = tuple[int, int, int]
"""What a repair gives up, compared as a tuple: its level, the iterations its trial saw it pass over work
in, the rows it dropped there."""


def static_level(decision: Decision, crash: Crash) -> int:
    """The level `decision` gives up at `crash`, from its kind and its code (see the module docstring)."""
    if isinstance(decision, SkipIteration):
        return ITERATION
    if isinstance(decision, Skip):
        return _skip_level(crash)
    kind = wire_kind(decision)
    if kind is None:
        return NOTHING
    old = crash.source if isinstance(decision, Surgery) else None
    return giving_up.of_code(kind, code_of(decision) or "", old if not isinstance(decision, Action) else None)


def given_up(verdict: Verdict | None, level: int) -> GivenUp:
    """What a repair of static `level` gave up in its trial: what the trial measured where it saw iterations
    (nothing passed over: `NOTHING`, whatever the code looked like; only rows: `ROWS`; else the static level,
    at least an iteration's), else the static level alone."""
    if verdict is None or not verdict.iterations:
        return level, 0, 0
    iterations = verdict.iterations
    over = passing_over(iterations)
    rows = sum(it.rows_dropped for it in iterations)
    if not over and not rows:
        return NOTHING, 0, 0
    plan = planned_steps(iterations)
    if all(it.rows_dropped and not missing_steps(it, plan) for it in over):
        return ROWS, len(over), rows
    return (level if level >= REPORT else ITERATION), len(over), rows


def _skip_level(crash: Crash) -> int:
    """A skip's level: a statement that only reports, one that assigns (or a header: its block unrun), or
    a call made for its effect (work of the iteration passed over)."""
    if crash.kind != "statement":
        return STATEMENT
    try:
        tree = ast.parse(textwrap.dedent(crash.statement))
    except SyntaxError:
        return STATEMENT
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Expr):
        return STATEMENT
    call = tree.body[0].value
    call = call.value if isinstance(call, ast.Await) else call
    if isinstance(call, ast.Call) and _reports(call.func, crash):
        return REPORT
    return ITERATION


def _reports(called: ast.expr, crash: Crash) -> bool:
    """Whether `called` only reports: the builtin `print`, a reporting module's function called through the
    module, or a method of a live value whose class is a reporter's (`repairbot.giving_up.REPORTERS`)."""
    if isinstance(called, ast.Name):
        return called.id == "print" and "print" not in crash.locals and "print" not in crash.globals
    if not isinstance(called, ast.Attribute) or not isinstance(called.value, ast.Name):
        return False
    name = called.value.id
    value = crash.locals[name] if name in crash.locals else crash.globals.get(name)
    if isinstance(value, ModuleType):
        return name in REPORTING_MODULES and value.__name__ == name
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}".startswith(REPORTERS) if value is not None else False

