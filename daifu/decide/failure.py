"""DaiFu's own failures while deciding: said as DaiFu's, once, with what it was doing.

The decision sources are DaiFu's code (the bot's client, the allowlist, trials, replay, the
console), except the policy, which is the user's. When DaiFu's code fails, the user's exception goes
on unchanged, as without DaiFu, and the terminal says once per run that DaiFu failed, at which step,
with the error and the place in DaiFu's code that raised it: a bug to report, not the program's.

A step names itself with `doing`: `with doing("checking the bot's suggestion 2 (surgery) against the
allowlist"): ...` turns an exception raised inside into `DecisionFailed`, which keeps it as its cause.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Iterator
from contextlib import contextmanager

from daifu.say import say_once


class DecisionFailed(Exception):
    """A step of DaiFu's decision layer raised `error` while `doing` something (the error is the cause)."""

    def __init__(self, doing: str, error: BaseException) -> None:
        super().__init__(f"while {doing}: {error!r}")
        self.doing = doing
        self.error = error


@contextmanager
def doing(what: str) -> Iterator[None]:
    """Name the step that runs inside: an exception it raises becomes `DecisionFailed(what, error)`."""
    try:
        yield
    except DecisionFailed:
        raise  # the innermost step names it
    except Exception as error:
        raise DecisionFailed(what, error) from error


def report(who: str, error: BaseException) -> None:
    """Say once that DaiFu's own `who` (its bot, its replay...) failed, and that the user's exception goes on."""
    step = f" while {error.doing}" if isinstance(error, DecisionFailed) else ""
    cause = error.error if isinstance(error, DecisionFailed) else error
    say_once(
        f"DaiFu's own {who} failed{step}: {_text(cause)}{_where(cause)}; the original exception goes on, as "
        "without DaiFu (a bug of DaiFu: please report it)"
    )


def _text(error: BaseException) -> str:
    try:
        message = str(error)
    except Exception:  # noqa: BLE001 - an error whose message cannot be made still has a type
        message = "<no message>"
    if isinstance(error, KeyError) and error.args:
        message = repr(error.args[0])
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _where(error: BaseException) -> str:
    entries = traceback.extract_tb(error.__traceback__)
    if not entries:
        return ""
    last = entries[-1]
    return f" (raised at {os.path.basename(last.filename)}:{last.lineno})"
