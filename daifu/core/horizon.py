"""The horizon of a trial: the iterations its copy runs past the crashed one, and what they show.

A repair that lets the crashed iteration finish can still do harm that shows only over the next
iterations: a surgery whose `continue` fires on most batches (training stops, silently), a filter that
drops one class's rows from every batch, a skip that the same bad data calls for again and again. So
the trial's copy (`daifu.core.trial`) runs on past the crashed iteration, up to `trial_iterations`
more iterations of its loop or the trial's time, whichever comes first, and notes for each iteration
(`IterationFacts`): how often the repair's own code ran (`daifu.core.repair_path`), whether it
passed over work (a skip applied, a `continue`, `break` or `return` of a surgery run, rows dropped
from a batch), the optimizer steps taken (`daifu.core.steps`), the losses and the trained state's health.

`judge` says why those facts fail the repair. A repair passes only if, in the iterations the copy saw:

- nothing of the trained state became non-finite or was thrown away;
- the parameters the crashed iteration's loss trains are still trained: by the last iteration the
  copy saw past the crashed one, none that an optimizer holds was left unchanged while steps changed
  others of them (`daifu.core.trained`: a detached branch stops learning, silently);
- it passes over work in at most `pass_over_budget` iterations (by default 1: the crashed one). An
  iteration in which the repair's code ran and that took fewer optimizer steps than the program's
  own iterations passed over work too: the plan is the fewest steps the iterations past the crash in
  which the repair's code did not run took. Where it ran in each, the plan is not known and no step
  is judged: the steps the program took before the crash (`steps_before`) cannot say how many an
  iteration of this loop takes (a REINFORCE loop steps once an episode, not once a move);
- training goes on (a running total the function adds to, `running_loss += ...`, grows by design and
  is not judged): each loss that was finite before the crash, or first known finite at the end of
  the crashed iteration (the crash came before the program computed it; a framework's step returns
  it, `daifu.core.step_horizon`), stays finite; and the median of one known before the crash over
  those iterations is not worse by more than `LOSS_MARGIN` than both before the crash and at the end
  of the crashed iteration as the repair left it: a crash often comes where the program changes
  phase (eight augmented views from step 60, a longer context), and the loss before it belongs to
  the phase before.

What the copy did not see (a loop that ended, data the copy cannot read, the time spent) is not
judged at all: never a pass of the unseen part, and the verdict says how far it saw.
"""

from __future__ import annotations

import ast
import inspect
import math
import statistics
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from types import CodeType
from typing import Any

LOSS_MARGIN = (0.5, 0.05)
"""How much worse than before the crash a loss may be over the horizon (its median): half of it, plus
0.05 — one batch's loss is noisy, a loss that doubles is not noise."""


@dataclass(frozen=True)
class IterationFacts:
    """What a trial saw in one iteration of the loop the crash was in.

    index: 0 for the rest of the crashed iteration, 1, 2, ... for the iterations past it.
    complete: whether it ended (else the trial ended inside it). seconds: how long it took in the copy.
    fired: how many times the repair's own code ran (an action or a skip applied, a run of a surgery's
        changed statements). passed_over: how many of those passed over work; what: what they passed
        over (`` `continue` at line 9``, `the rest of the iteration`, `12 rows of \\`y\\``).
    rows_dropped: samples the repair's code left out of a batch. steps: optimizer steps taken (`None`:
        not counted). losses: the scalar losses at its end. spoilt, discarded: the trained state that
        became non-finite, or was thrown away, by its end. untrained: the parameters the crashed loss
        trains that no step changed by its end, while steps changed others of them.
    """

    index: int
    complete: bool = True
    seconds: float = 0.0
    fired: int = 0
    passed_over: int = 0
    what: tuple[str, ...] = ()
    rows_dropped: int = 0
    steps: int | None = None
    losses: Mapping[str, float] = field(default_factory=dict)
    spoilt: tuple[str, ...] = ()
    discarded: tuple[str, ...] = ()
    untrained: tuple[str, ...] = ()

    def to_data(self) -> dict[str, Any]:
        data = asdict(self)
        data["losses"] = dict(self.losses)
        return data

    @staticmethod
    def from_data(data: Mapping[str, Any]) -> IterationFacts:
        known = {name: data[name] for name in IterationFacts.__dataclass_fields__ if name in data}
        for name in ("what", "spoilt", "discarded", "untrained"):
            known[name] = tuple(known.get(name, ()))
        known["losses"] = {str(k): float(v) for k, v in dict(known.get("losses", {})).items()}
        return IterationFacts(**known)


def past(iterations: Iterable[IterationFacts]) -> list[IterationFacts]:
    """The iterations past the crashed one that ended."""
    return [it for it in iterations if it.index >= 1 and it.complete]


def planned_steps(iterations: Sequence[IterationFacts]) -> int | None:
    """The optimizer steps an iteration of the program takes: the fewest taken by the iterations past
    the crash in which the repair's code did not run; `None` when there is none (or steps are not counted)."""
    own = [it.steps for it in past(iterations) if not it.fired and it.steps is not None]
    return min(own) if own else None


def missing_steps(it: IterationFacts, plan: int | None) -> int:
    """The optimizer steps an iteration past the crash passed over: fewer than the plan, where the
    repair's code ran."""
    if plan is None or it.index < 1 or not it.complete or not it.fired or it.steps is None:
        return 0
    return max(plan - it.steps, 0)


def passing_over(iterations: Sequence[IterationFacts]) -> list[IterationFacts]:
    """The iterations in which the repair passed over work."""
    plan = planned_steps(iterations)
    return [it for it in iterations if it.passed_over or missing_steps(it, plan)]


def judge(iterations: Sequence[IterationFacts], budget: int, losses_before: Mapping[str, float]) -> tuple[str, ...]:
    """Why the iterations a trial saw fail the repair (see the module docstring); `()` when they do not."""
    reasons: list[str] = []
    for it in iterations:
        if it.spoilt:
            reasons.append(f"it spoils the run in {_name(it)}: non-finite {', '.join(it.spoilt[:3])}")
            break
    for it in iterations:
        if it.discarded:
            reasons.append(f"it discards trained state in {_name(it)}: {'; '.join(it.discarded[:2])}")
            break
    seen = past(iterations)
    if seen and seen[-1].untrained:
        reasons.append(f"it stops training what the crashed loss trains: by {_name(seen[-1])} no step changed "
                       f"{', '.join(seen[-1].untrained[:4])}")
    plan = planned_steps(iterations)
    over = passing_over(iterations)
    if len(over) > budget:
        allowed = "none is" if budget == 0 else ("1 is (the crashed one)" if budget == 1 else f"{budget} are")
        reasons.append(f"it passes over work in {len(over)} iterations, where {allowed} allowed: "
                       + "; ".join(_passed(it, plan) for it in over[:4]))
    crashed = next((it.losses for it in iterations if it.index == 0), {})
    reference = {name: max(value, crashed.get(name, value)) if math.isfinite(crashed.get(name, value)) else value
                 for name, value in losses_before.items()}
    reasons += _losses_worse(past(iterations), reference)
    reasons += _gone_nonfinite(past(iterations), {name: value for name, value in crashed.items()
                                                  if name not in losses_before})
    return tuple(reasons)


def _gone_nonfinite(seen: Sequence[IterationFacts], crashed: Mapping[str, float]) -> list[str]:
    """A loss first known at the end of the crashed iteration (a framework's step returns it; the crash
    came before the program computed it), finite there, that is not finite past the crash."""
    reasons = []
    for name, at_crash in crashed.items():
        bad = next((it for it in seen if name in it.losses and not math.isfinite(it.losses[name])), None)
        if bad is not None and math.isfinite(at_crash):
            reasons.append(f"`{name}` became {bad.losses[name]} in {_name(bad)} (it was {at_crash:.4g} at the end of "
                           "the crashed iteration)")
    return reasons


def running_totals(code: CodeType | None) -> frozenset[str]:
    """The names `code`'s function adds to in place (`running_loss += loss.item()`): a running total of
    losses grows with every iteration by design, and is no loss to judge; empty where the source cannot
    be read."""
    if code is None:
        return frozenset()
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(code)))
    except (OSError, TypeError, SyntaxError, ValueError):
        return frozenset()
    return frozenset(node.target.id for node in ast.walk(tree)
                     if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name))


def _losses_worse(seen: Sequence[IterationFacts], losses_before: Mapping[str, float]) -> list[str]:
    reasons = []
    relative, absolute = LOSS_MARGIN
    for name, before in losses_before.items():
        values = [it.losses[name] for it in seen if name in it.losses]
        if not values or not math.isfinite(before):
            continue
        if not all(math.isfinite(value) for value in values):
            reasons.append(f"`{name}` became {next(v for v in values if not math.isfinite(v))} past the crash "
                           f"(it was {before:.4g})")
            continue
        median = statistics.median(values)
        if median > before + relative * abs(before) + absolute:
            reasons.append(f"`{name}` got worse: {before:.4g} at the crash, {median:.4g} over the "
                           f"{len(values)} iterations past it (median)")
    return reasons


def _name(it: IterationFacts) -> str:
    return "the crashed iteration" if it.index == 0 else f"iteration {it.index} past the crash"


def _passed(it: IterationFacts, plan: int | None) -> str:
    what = list(it.what)
    missing = missing_steps(it, plan)
    if missing:
        what.append(f"{missing} optimizer step{'s' if missing > 1 else ''} not taken")
    return f"{_name(it)}: {', '.join(what[:3]) or 'work'}"


def summary(iterations: Sequence[IterationFacts], ended: str, steps_before: int | None,
            losses_before: Mapping[str, float]) -> str:
    """One line: how far the trial saw and what it saw there, e.g. `5 iterations past the crash: fired 4
    times, 3 of 5 optimizer steps, loss 0.69 -> 0.71`; then, after `;`, why it saw no further."""
    seen = past(iterations)
    count = len(seen)
    head = "no iteration past the crash" if not count else f"{count} iteration{'' if count == 1 else 's'} past the crash"
    parts = []
    fired = sum(it.fired for it in iterations)
    parts.append(f"fired {fired} time{'' if fired == 1 else 's'}" if fired else "its code did not run again")
    over = passing_over(iterations)
    if over:
        parts.append(f"passed over work in {len(over)}")
    rows = sum(it.rows_dropped for it in iterations)
    if rows:
        parts.append(f"dropped {rows} rows")
    counted = [it.steps for it in seen if it.steps is not None]
    if counted:
        plan = planned_steps(iterations)
        taken = sum(counted)
        steps = f"{taken} of {plan * len(counted)} optimizer steps" if plan else f"{taken} optimizer steps"
        parts.append(steps + (f" ({steps_before} before the crash)" if steps_before else ""))
    loss = _loss_change(seen, losses_before)
    if loss:
        parts.append(loss)
    return f"{head}: {', '.join(parts)}" + (f"; {ended}" if ended else "")


def _loss_change(seen: Sequence[IterationFacts], losses_before: Mapping[str, float]) -> str:
    for name, before in losses_before.items():
        values = [it.losses[name] for it in seen if name in it.losses]
        if values:
            return f"{name} {before:.4g} -> {values[-1]:.4g}"
    names = [name for it in seen for name in it.losses]
    if names:
        values = [it.losses[names[0]] for it in seen if names[0] in it.losses]
        return f"{names[0]} {values[0]:.4g} -> {values[-1]:.4g}"
    return ""
