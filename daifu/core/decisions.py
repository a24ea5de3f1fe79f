"""The decisions a policy, the console or the repair bot can take on a crash.

Each decision is a small immutable value; the runtime (`daifu.runtime`) carries it out.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Retry:
    """Run the faulty statement again, unchanged.

    On a loop header it asks the same iterator for its next item, so a batch that failed to load
    is passed over; on an `if`/`while` test or a `with` expression it evaluates it again.
    """


@dataclass(frozen=True)
class Skip:
    """Go on after the faulty statement (the console calls this `pass`).

    On a header the whole compound statement is left: a `for` or `while` ends as if exhausted
    (its `else` runs), an `if` takes neither branch, a `with` body does not run.
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
    the first changed statement of the block that crashed when the fix is further up.
    """

    source: str


@dataclass(frozen=True)
class Raise:
    """Give up: the original exception propagates with its original traceback."""


Decision = Retry | Skip | Action | Surgery | Raise
