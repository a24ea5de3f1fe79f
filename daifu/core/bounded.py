"""Calling user code that describes a value (`repr`, `str`) with a bound on its time.

A crash report or a console describes the live values by calling their `__repr__`; one that never
returns would hang the crash handler forever, and the run with it. `bounded` runs such a call
under a trace function that raises `TimedOut` at the first line executed after the deadline, so
a slow or endless `__repr__` written in Python is cut short. (Native code that never returns to
Python cannot be interrupted this way; the values DaiFu describes natively, tensors among them, are
read without calling their `__repr__`.)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")

DEFAULT_SECONDS = 0.5


class TimedOut(Exception):
    """A bounded call ran past its deadline."""


def bounded(function: Callable[..., T], *arguments: Any, seconds: float = DEFAULT_SECONDS) -> T:
    """`function(*arguments)`, raising `TimedOut` if its Python code runs past `seconds`."""
    deadline = time.monotonic() + seconds
    previous = sys.gettrace()

    def watch(frame: FrameType, event: str, arg: Any) -> Any:
        if time.monotonic() > deadline:
            raise TimedOut(f"{getattr(function, '__qualname__', function)!s} took more than {seconds:g} s")
        return watch

    sys.settrace(watch)
    try:
        return function(*arguments)
    finally:
        sys.settrace(previous)


def describe(value: Any, how: Callable[[Any], str] = repr, seconds: float = DEFAULT_SECONDS) -> str:
    """`how(value)` (by default `repr`), or a short note saying why it could not be had."""
    try:
        return bounded(how, value, seconds=seconds)
    except TimedOut:
        return f"<{how.__name__} timed out>"
    except Exception as error:  # a user __repr__ may raise anything
        return f"<{how.__name__} failed: {type(error).__name__}>"
