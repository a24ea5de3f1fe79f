"""`transform`: the decorator that vaccinates a function."""

from __future__ import annotations

import functools
import inspect
import warnings
from types import FunctionType
from typing import Any, TypeVar, overload
from collections.abc import Callable

from daifu import config
from daifu.store import record
from daifu.core.resume import Vaccine
from daifu.core.source import SourceUnavailable, function_source

F = TypeVar("F", bound=Callable[..., Any])


@overload
def transform(target: F) -> F: ...
@overload
def transform(target: dict[str, Any] | None = None) -> Callable[[F], F]: ...


def transform(target: Any = None) -> Any:
    """Vaccinate a function: a crash inside it is caught in place and can be repaired and resumed.

    Usable as `@daifu.transform`, `@daifu.transform()` and the seed's `@daifu.transform(globals())`
    (the globals are those of the function; the argument is accepted for compatibility). Works on
    functions, methods, static and class methods. Generator and async functions raise `TypeError`.
    A function whose source cannot be read runs unvaccinated, with a warning.
    """
    if target is None or isinstance(target, dict):
        return _vaccinate
    return _vaccinate(target)


def _vaccinate(target: Any) -> Any:
    if isinstance(target, (staticmethod, classmethod)):
        return type(target)(_vaccinate(target.__func__))
    if not isinstance(target, FunctionType):
        warnings.warn(f"daifu.transform: {target!r} is not a plain function; left unvaccinated", RuntimeWarning, 3)
        return target
    if inspect.isgeneratorfunction(target) or inspect.iscoroutinefunction(target) or inspect.isasyncgenfunction(target):
        what = "an async" if not inspect.isgeneratorfunction(target) else "a generator"
        raise TypeError(
            f"daifu.transform cannot vaccinate {target.__qualname__!r}: it is {what} function, and DaiFu "
            "resumes only plain functions; vaccinate the function that drives it instead"
        )
    if config.settings().mode == "off":
        return target
    try:
        source, first_lineno = function_source(target)
    except SourceUnavailable as why:
        warnings.warn(
            f"daifu.transform: the source of {target.__qualname__!r} cannot be read ({why}); it runs unvaccinated",
            RuntimeWarning,
            3,
        )
        return target
    try:
        vaccine = Vaccine(target, source, first_lineno)
    except Exception as error:  # fail open: never break the user's import
        warnings.warn(
            f"daifu.transform could not vaccinate {target.__qualname__!r} ({error!r}); it runs unvaccinated",
            RuntimeWarning,
            3,
        )
        return target
    function = vaccine.function
    functools.update_wrapper(function, target)
    function.__kwdefaults__ = target.__kwdefaults__
    function.__daifu__ = vaccine  # type: ignore[attr-defined]
    record.program_begin()
    return function
