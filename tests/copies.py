"""A fresh copy of a function, for tests that vaccinate one function several times.

`daifu.transform(fn)` vaccinates `fn` itself, in place (as a decorator must, so that wrappers
holding it run the vaccinated code); a test that wants the original untouched vaccinates a copy.
"""

from __future__ import annotations

import functools
from types import FunctionType
from typing import Any, TypeVar

F = TypeVar("F", bound=FunctionType)


def fresh(fn: F) -> F:
    """A new function object with `fn`'s code, globals, name, defaults and closure."""
    copy = FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    functools.update_wrapper(copy, fn, updated=())
    del copy.__wrapped__  # type: ignore[attr-defined]  # a copy, not a wrapper: nothing to unwrap
    return copy  # type: ignore[return-value]


def plain(fn: Any) -> Any:
    """The unvaccinated original of a vaccinated function."""
    return fn.__daifu__.plain
