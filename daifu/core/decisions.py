"""The decisions a policy, the console or the repair bot can take on a crash.

Each decision is a small immutable value; the runtime (`daifu.core.resume`) carries it out. The names
each kind goes by (in the record, on the wire, on the approval page, at the console) and every codec
are in one table, `daifu.core.kinds`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Retry:
    """Run the faulty statement again, unchanged.

    On a `for` header it loads again the item the loop's iterator failed to load where it can (a
    torch DataLoader without worker processes, read directly, through `enumerate` or first in a `zip`:
    `daifu.core.refetch`), then goes on with the same iterator; elsewhere it asks the same iterator
    for its next item, so the item that failed is passed over, counted, and the terminal says why.
    On an `if`/`while` test or a `with` expression it evaluates it again. An `Action`, a `Patch` and
    a `Surgery` resuming at the header do the same once they are carried out.
    """


@dataclass(frozen=True)
class Pass(Retry):
    """Run the faulty statement again, unchanged, recorded as `Pass` (the prototype's name for it).

    The console's `pass` and a recorded `Pass` (`REPEAT_ACTIONS`) take it; it does what `Retry` does.
    """


@dataclass(frozen=True)
class Skip:
    """Go on after the faulty statement (the console's `skip`).

    The names the statement would have assigned keep their old values (or stay unbound). On a
    header the whole compound statement is left: a `for` or `while` ends as if exhausted (its
    `else` runs), an `if` takes neither branch, a `with` body does not run.
    """


@dataclass(frozen=True)
class SkipIteration:
    """Leave the rest of the current iteration of the innermost loop holding the faulty statement.

    As a `continue` there would: the loop goes on with its next item (a `for`) or its next test (a
    `while`); nothing the rest of the iteration would have done is done, so a bad batch is not
    trained on. Refused when the faulty statement is in no loop of the function.

    At the header of a `for` whose iterator failed to load an item, that item is the iteration passed
    over: the loop goes on with its next one (never loading the failed one again, unlike `Retry`);
    where it has none (a generator that ended when it raised), the iteration of the loop around it.
    """


@dataclass(frozen=True)
class Action:
    """Run `code` in the live context of the faulty frame, then run the faulty statement again.

    The code reads and rebinds the function's local variables and the module's globals.
    """

    code: str


@dataclass(frozen=True)
class Surgery:
    """Replace the vaccinated function by `source` (the whole new `def`), and resume in it.

    Execution resumes at the statement of the new source that corresponds to the faulty one, or at
    the first changed statement earlier in the interrupted iteration when the fix is further up,
    at any nesting of the faulty statement (`daifu.core.surgery.resume_path`).
    """

    source: str


@dataclass(frozen=True)
class Patch:
    """Give the function `target` (`module:qualname`, a function the crashed statement called) the
    code of `source` (its whole new `def`), in place, then run the faulty statement again.

    Every reference to the function follows (its code is swapped, as live-update tools do); it
    keeps its name, parameters, defaults and closure, which the new source may not change.
    """

    target: str
    source: str


@dataclass(frozen=True)
class Raise:
    """Give up: the original exception propagates with its original traceback."""


@dataclass(frozen=True)
class Plays:
    """Several plays for one crash, carried out in order, then one resume (`[['Action', 'Surgery']]`).

    Each action runs on the state the previous steps left, each surgery is validated against the
    version the previous one produced; the run resumes where the last step that moves the resume
    point says (a surgery's resume point, `Skip`, `SkipIteration`), else at the faulty statement.
    If any step is refused, the whole is, and the program is left as it was (an action's in-place
    mutations of objects excepted, as for a single action). `Raise`, `Patch` and `Plays` cannot be
    steps.
    """

    steps: tuple[Retry | Skip | SkipIteration | Action | Surgery, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.steps, tuple) or not self.steps:
            raise BadDecision("Plays needs a non-empty tuple of steps")
        for step in self.steps:
            if not isinstance(step, STEP_TYPES):
                allowed = ", ".join(kind.__name__ for kind in STEP_TYPES)
                raise BadDecision(f"{step!r} cannot be one of several plays (only {allowed})")


Decision = Retry | Skip | SkipIteration | Action | Surgery | Patch | Raise | Plays
STEP_TYPES: tuple[type, ...] = (Retry, Skip, SkipIteration, Action, Surgery)
"""What may be one of several plays (`Plays`): `daifu.core.kinds` marks the same kinds as steps."""


class BadDecision(ValueError):
    """Stored data that is not a decision DaiFu can carry out; the message names what is wrong."""
