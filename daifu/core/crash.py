"""`Crash`: what a policy, the console and the repair bot receive when a statement raises."""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from functools import cached_property
from types import FrameType
from typing import TYPE_CHECKING, Any
from collections.abc import Callable, Mapping, Sequence

from daifu.core.bounded import TimedOut, bounded, describe

if TYPE_CHECKING:
    from daifu.core.decisions import Decision
    from daifu.core.trial import Verdict


def _no_trial(decision: Decision, seconds: float | None = None, horizon: int | None = None,
              in_process_up_to: int | None = None) -> Verdict:
    from daifu.core.trial import Outcome, Verdict

    return Verdict(Outcome.UNAVAILABLE, detail="this crash has no live run to try a repair on")


@dataclass(frozen=True)
class Crash:
    """One intercepted crash, described in the user's own file and line numbers; read-only.

    `locals` is a read-only snapshot of the live local values at the faulty point; `frame` is the
    live frame itself (the console inspects it).
    `kind` is `"statement"` for an ordinary statement, or the keyword of the compound statement
    whose header raised (`"for"`, `"while"`, `"if"`, `"with"`, `"match"`).
    `tried` lists the repairs already attempted for this crash, as `(decision, outcome)` strings
    (the runtime keeps it; a decider notes what it tried through its `RepairContext`).
    `check(decision)` tells, without applying anything, why a decision would be refused (a
    surgery that does not compile, renames the function...), or returns `None`.
    `trial(decision, seconds=None, horizon=None, in_process_up_to=None)` tries a decision in a sandboxed
    copy of the process and returns its `daifu.core.trial.Verdict`, leaving this process untouched: the
    copy runs the rest of the crashed iteration, then up to `horizon` more iterations of its loop (by
    default the `trial_iterations` setting), and the verdict holds what it saw in each
    (`Verdict.iterations`: the repair's code run, work passed over, optimizer steps, losses, health;
    `daifu.core.horizon`). With `in_process_up_to` (bytes) it runs in process instead where the state
    to copy and put back fits in them and the `trials` setting is `auto` (`Vaccine.trial`).
    `globals` are the faulty function's module globals.
    What the layers that decide add to a crash (its record entry, a watch, a person's edits of the
    locals, its settings) travels beside it, in a `daifu.core.handling.RepairContext`.
    """

    exception: BaseException
    function_name: str
    qualname: str
    source: str
    filename: str
    first_lineno: int
    lineno: int
    statement: str
    kind: str
    locals: Mapping[str, Any]
    attempt: int
    frame: FrameType | None = None
    tried: Sequence[tuple[str, str]] = ()
    check: Callable[[Decision], str | None] = field(default=lambda decision: None, repr=False)
    trial: Callable[..., Verdict] = field(default=_no_trial, repr=False)
    globals: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @cached_property
    def traceback_text(self) -> str:
        """The exception's traceback, formatted as Python prints it (computed when first asked)."""
        error = self.exception

        def text() -> str:
            return "".join(traceback.format_exception(type(error), error, error.__traceback__))

        try:
            return bounded(text)
        except (TimedOut, Exception) as failure:
            return f"{type(error).__name__}: <the traceback could not be formatted: {type(failure).__name__}>"

    @cached_property
    def message(self) -> str:
        """`str(exception)`, computed once and bounded in time; a failing `__str__` is described."""
        return describe(self.exception, str)

    @property
    def site(self) -> tuple[str, str, int]:
        """Function, file and line: what two crashes must share to be "the same crash"."""
        return (self.qualname, self.filename, self.lineno)

    @property
    def exception_type(self) -> str:
        """The exception's class name, as a record or a report prints it."""
        return type(self.exception).__name__
