"""The one verification stage of a decision proposed for a crash: check, allowlist, trial.

Whoever proposes a repair (the bot, a person on the approval page, at the console or its `ask`),
nothing touches the run before this stage says it may:

1. check: the runtime's dry run (`crash.check`: the surgery compiles and maps onto the running
   version, the action parses...) and, in code from the bot, no `<redacted:...>` placeholder left
   where a redacted line stood;
2. allowlist: whether its code may run without a person (`daifu.decide.allowlist`), and whether its
   effect is one a trial can see at all (`unverifiable`): else it is applied only by a person;
3. trial: a sandboxed copy of the run (`crash.trial`) that carries it out through the runtime's own
   resume path, within `trial_seconds` and the seconds its code deliberately sleeps, and looks past the
   crashed iteration along its loop (`daifu.core.horizon`): a repair passes only if, in the iterations
   the copy saw, it passes over work within `pass_over_budget`, training goes on, and nothing is
   spoilt or discarded (`Verdict.passed`). Unattended, a
   trial that stopped at an effect the candidate's own code reached fails it, but the folder a failing
   write needs (`daifu.decide.trial_effects`): applied, the repair would do it for real.

`Verification` holds the stage for one crash; `daifu.decide.candidates` keeps what it found for each
candidate, and the approvers (`daifu.decide.automatic`, `daifu.decide.remote`, the console) read it.
"""

from __future__ import annotations

import ast
import sys
import textwrap
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from daifu.config import Settings
from daifu.core.crash import Crash
from daifu.core.decisions import Action, Decision, Plays, Skip, Surgery
from daifu.core.handling import RepairContext
from daifu.core.kinds import code_of, kind_of, target_of, wire_kind
from daifu.core.names import bound_names
from daifu.core.trial import Outcome, Verdict
from daifu.decide.allowlist import Context, check_suggestion, context_for
from daifu.decide.failure import doing
from daifu.decide.giving_up import NAMES, NOTHING
from daifu.decide.trial_effects import repair_effect
from daifu.report.redact import has_placeholder
from daifu.say import say, say_once

if TYPE_CHECKING:
    from daifu.decide.candidates import Candidate

MAX_SLEEP_S = 600.0
"""Seconds of deliberate sleep a trial is given on top of `trial_seconds`, at most."""


@dataclass(frozen=True)
class _Proposed:
    """A decision as the allowlist reads a suggestion: its kind, its code, a patch's target."""

    kind: str
    code: str
    target: str | None


@dataclass
class Verification:
    """The verification stage for the decisions proposed for one crash, under `settings`.

    What the frame tells the allowlist (its modules, callables, containers) is read once, when first needed.
    """

    crash: Crash
    settings: Settings
    _frame_facts: Context | None = field(default=None, init=False, repr=False)

    def problems(self, decision: Decision) -> tuple[str, ...]:
        """Why the runtime refuses `decision` here (a dry run; nothing changes), or a redaction placeholder
        left in its code; `()` when it can be applied."""
        if has_placeholder(code_of(decision) or ""):
            return ("it holds a `<redacted:...>` placeholder from the crash report where code should be",)
        problem = self.crash.check(decision)
        return (problem,) if problem else ()

    def outside_allowlist(self, decision: Decision) -> tuple[str, ...]:
        """Why `decision`'s code is outside the allowlist of code that may run without a person (then it does
        not run, even on a copy, before a person applies it)."""
        if isinstance(decision, Plays):
            return ("several plays are applied only by a person",)
        kind = wire_kind(decision)
        if kind is None:
            return (f"a {kind_of(decision).play} is applied only by a person",)
        if self._frame_facts is None:
            self._frame_facts = context_for(self.crash)
        proposed = _Proposed(kind, code_of(decision) or "", target_of(decision))
        return tuple(check_suggestion(proposed, self._frame_facts).reasons)

    def trial(self, decision: Decision) -> Verdict:
        """`decision` tried on a sandboxed copy of the run, within `trial_seconds` and what its code sleeps."""
        return self.crash.trial(decision, self.settings.trial_seconds + sleep_seconds(decision))

    def repair_effect(self, decision: Decision, verdict: Verdict) -> str | None:
        """Why `verdict` fails `decision` without a person: its own code reached the effect the trial
        stopped at, and it is none a repair may have (`daifu.decide.trial_effects`)."""
        return repair_effect(decision, verdict, self.crash, self._frame_facts)

    def cannot_discard(self, decision: Decision) -> bool:
        """Whether `decision`, applied without a trial, cannot throw away trained state or skip work
        silently: a kind that never can (a retry, the skip of a whole iteration), or code that only adds
        statements and binds no name that holds a model or an optimizer."""
        if kind_of(decision).harmless:
            return True
        crash = self.crash
        if isinstance(decision, Action):
            return not (_bound_names(decision.code) & _stateful_names(crash))
        if isinstance(decision, Surgery):
            added = _added_statements(crash.source, decision.source)
            return added is not None and not (_bound_names(added) & _stateful_names(crash))
        return False

    # -- the stage over the ranked candidates of a crash -------------------------------------

    def to_try(self, found: list[Candidate]) -> list[Candidate]:
        """The candidates tried before a person chooses: usable, inside the allowlist (the bot's other code
        does not run, even sandboxed, until a person applies it), the first `max_trials` of them."""
        return [c for c in found if c.usable and not c.outside_allowlist][: self.settings.max_trials]

    def for_a_person(self, found: list[Candidate]) -> list[Candidate]:
        """The usable candidates, those of `to_try` tried on a copy of the run, so that a person choosing
        among them sees each verdict (a candidate tried already keeps its verdict)."""
        for candidate in self.to_try(found):
            if candidate.verdict is None:
                candidate.tried(self.trial(candidate.decision))
        return [c for c in found if c.usable]

    def first_passing(self, found: list[Candidate], context: RepairContext) -> Candidate | None:
        """The best candidate that may be applied without a person: usable, inside the allowlist, and its
        trial passed (or, where no trial can run, it cannot discard trained state). A candidate refused
        by its trial is noted as tried, so a repeat of the crash does not try it again; each refused is
        said on the terminal afterwards (`daifu.decide.tried`), with what stopped it.

        `found` is in rank order, so the first that passes is taken unless its trial saw it give up work
        (`Candidate.given_up`): then only the candidates after it that may give up less by their kind and
        code are tried too, and of those that pass the one that gave up least is taken."""
        settings = self.settings
        started = time.monotonic()
        trials = 0
        best: Candidate | None = None
        for number, candidate in enumerate(found, 1):
            if best is not None and candidate.level >= best.given_up[0]:
                continue  # by what it is, it cannot give up less than the one that passed
            what = f"the bot's suggestion {number} ({candidate.kind})"
            with doing(f"checking {what} with the runtime's own validation"):
                usable = candidate.usable
            if not usable:
                continue
            with doing(f"checking {what} against the allowlist"):
                unsafe = candidate.unsafe
            if unsafe:  # said with the others refused (`daifu.decide.tried`)
                continue
            spent = time.monotonic() - started
            if trials >= settings.max_trials or spent > settings.max_trials * settings.trial_seconds:
                say(f"stopped after {trials} trials; the other suggestions were not tried")
                break
            with doing(f"trying {what} on a copy of the run"):
                verdict = candidate.verdict or self.trial(candidate.decision)  # tried already if a person was asked
                candidate.tried(verdict)
            trials += 1
            if verdict.outcome is Outcome.UNAVAILABLE:
                say_once(f"no trial of a repair can run here: {verdict.detail}; only repairs that cannot discard "
                         "trained state are applied automatically")
                if self.cannot_discard(candidate.decision):
                    return candidate
                continue
            if verdict.passed and not candidate.trial_problems:
                if best is not None and candidate.given_up < best.given_up:
                    say(f"the bot's {candidate.kind} (suggestion {number}) passed its trial giving up less than "
                        f"the one that passed before it: {NAMES[best.given_up[0]]} -> {NAMES[candidate.given_up[0]]}")
                best = candidate if best is None or candidate.given_up < best.given_up else best
                if best.given_up[0] == NOTHING:
                    return best
                continue
            why = candidate.trial_problems[0] if candidate.trial_problems else verdict.describe()
            context.note_tried(candidate.decision, f"refused by its trial: {why}")
        return best


def unverifiable(decision: Decision, crash: Crash) -> tuple[str, ...]:
    """Why `decision` may not be applied without a person although its trial passes: a skipped statement that
    assigns leaves its targets holding what they held before (or unbound), and a skipped compound statement
    leaves its whole block unrun. The trial ends with the iteration and sees a healthy run; what the stale
    value does to the result (the previous step's action taken again, a metric never computed) shows only
    later, as a run that finishes with a different result. A skip of a statement that assigns nothing
    (a call for its effect) stays a candidate, ranked last."""
    if not isinstance(decision, Skip):
        return ()
    if crash.kind != "statement":
        return (f"skipping the `{crash.kind}` statement would leave its whole block unrun, silently",)
    assigned = _assigned(crash.statement)
    if assigned is None:
        return ("skipping the statement: what it assigns cannot be read, so stale values cannot be ruled out",)
    if assigned:
        return (f"skipping the statement would leave {', '.join(f'`{t}`' for t in assigned[:4])} holding its value "
                "from before the crash; no trial can tell what that does to the result",)
    return ()


def _assigned(statement: str) -> list[str] | None:
    """The targets `statement` assigns (names, attributes, items), in order; None when it does not parse."""
    try:
        tree = ast.parse(textwrap.dedent(statement))
    except SyntaxError:
        return None
    targets: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets += node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)):
            targets.append(node.target)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            targets += [ast.Name((a.asname or a.name).split(".")[0]) for a in node.names]
    return [ast.unparse(t) for t in targets]


def sleep_seconds(decision: Decision) -> float:
    """The seconds an action deliberately sleeps (`time.sleep(<number>)`): its trial gets them on top."""
    code = code_of(decision) if isinstance(decision, Action) else None
    try:
        tree = ast.parse(textwrap.dedent(code or ""))
    except SyntaxError:
        return 0.0
    total = 0.0
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "sleep"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, (int, float))
        ):
            total += float(node.args[0].value)
    return min(total, MAX_SLEEP_S)


def _stateful_names(crash: Crash) -> set[str]:
    torch = sys.modules.get("torch")
    if torch is None:
        return set()
    values = {**dict(crash.globals), **dict(crash.locals)}
    kinds = (torch.nn.Module, torch.optim.Optimizer)
    return {name for name, value in values.items() if isinstance(value, kinds)}


def _bound_names(code: str) -> set[str]:
    """The names `code` binds anywhere in it (nested functions included); `{"*"}` when it does not parse."""
    try:
        tree = ast.parse(textwrap.dedent(code))
    except SyntaxError:
        return {"*"}
    return bound_names(tree, nested=True, imports=False)


def _added_statements(old: str, new: str) -> str | None:
    """The statements `new` adds to `old`, when it only adds (every old statement kept, in order)."""
    try:
        old_tree, new_tree = ast.parse(textwrap.dedent(old)), ast.parse(textwrap.dedent(new))
    except SyntaxError:
        return None
    old_statements = [ast.dump(s) for s in ast.walk(old_tree) if isinstance(s, ast.stmt) and not _compound(s)]
    new_statements = [s for s in ast.walk(new_tree) if isinstance(s, ast.stmt) and not _compound(s)]
    remaining = list(old_statements)
    added = []
    for statement in new_statements:
        if remaining and ast.dump(statement) == remaining[0]:
            remaining.pop(0)
        else:
            added.append(statement)
    return None if remaining else "\n".join(ast.unparse(s) for s in added)


def _compound(node: ast.stmt) -> bool:
    return hasattr(node, "body")
