"""What the console's `describe` prints: the function's source with the faulty line marked, then
the exception and a traceback that shows the values of the names on each line.

The source is the one that is running (the original, or the last surgery), not the transformed
code DaiFu compiled, and it is numbered as in the user's file. The traceback is better_exceptions'
with one change: tensors and arrays are shown by shape, dtype and device, since their numbers would
fill the screen and computing them may cost a device synchronisation. Without better_exceptions
(the `daifu[console]` extra) the traceback is Python's own, and `describe` says so.
"""

from __future__ import annotations

import re
import sys
from types import TracebackType
from typing import Any
from collections.abc import Iterator

from daifu.console.colour import paint
from daifu.core.crash import Crash

_ITEMS = 8
"""Items of a list, tuple or dict shown before `...`."""
_DEPTH = 2
"""Container levels opened; deeper ones are shown by their plain repr, cut to better_exceptions' length."""


def describe(crash: Crash, colour: bool) -> str:
    """The whole `describe` text for `crash`."""
    heading = f"{crash.qualname} in {crash.filename}, line {crash.lineno}:"
    return "\n".join([paint(heading, "bold", colour), *listing(crash, colour), "", traceback_text(crash, colour)])


def listing(crash: Crash, colour: bool) -> Iterator[str]:
    """The running source with file line numbers; the faulty statement's lines marked `>>`."""
    lines = crash.source.splitlines()
    faulty = range(crash.lineno, crash.lineno + crash.statement.count("\n") + 1)
    width = len(str(crash.first_lineno + len(lines)))
    for number, text in enumerate(lines, crash.first_lineno):
        if number in faulty:
            yield paint(f">> {number:>{width}}  {text}", "red", colour)
        else:
            yield f"   {number:>{width}}  {text}"


def traceback_text(crash: Crash, colour: bool) -> str:
    """The exception with a value-annotated traceback from the faulty frame down.

    Falls back to the plain traceback if formatting fails: `describe` must always answer.
    """
    try:
        from daifu.console.annotated import ValueFormatter
    except ImportError as missing:
        return (
            f"{crash.traceback_text.rstrip()}\n(values not shown: {missing.name or missing} is not installed; "
            "pip install 'daifu[console]')"
        )
    formatter = ValueFormatter(crash, colour)
    error = crash.exception
    try:
        return "".join(formatter.format_exception(type(error), error, from_faulty_frame(crash))).rstrip("\n")
    except Exception as failure:  # a user __repr__ or an unexpected source; say so and show the plain one
        return f"{crash.traceback_text.rstrip()}\n(values not shown: {type(failure).__name__}: {failure})"


def value_text(value: Any, depth: int = 0) -> str:
    """`repr(value)` on one line, with tensors and arrays (also inside lists, tuples and dicts)
    shown by `brief` instead of their numbers."""
    shown = brief(value)
    if shown is not None:
        return shown
    if depth < _DEPTH and type(value) in (list, tuple):
        items = [value_text(item, depth + 1) for item in value[:_ITEMS]] + (["..."] if len(value) > _ITEMS else [])
        text = ", ".join(items)
        return f"[{text}]" if type(value) is list else f"({text}{',' if len(value) == 1 else ''})"
    if depth < _DEPTH and type(value) is dict:
        pairs = [f"{key!r}: {value_text(item, depth + 1)}" for key, item in list(value.items())[:_ITEMS]]
        return "{" + ", ".join(pairs + (["..."] if len(value) > _ITEMS else [])) + "}"
    return re.sub(r"\n\s*", " ", repr(value))


def brief(value: Any) -> str | None:
    """A one-line description of a tensor or array, or `None` for other values.

    Looks at torch and numpy only when the program imported them already.
    """
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        grad = ", requires_grad=True" if value.requires_grad else ""
        return f"tensor(shape={list(value.shape)}, dtype={dtype}, device={value.device}{grad})"
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.ndarray):
        return f"ndarray(shape={list(value.shape)}, dtype={value.dtype})"
    return None


def from_faulty_frame(crash: Crash) -> TracebackType | None:
    """The exception's traceback from the vaccinated frame down (the frames above are DaiFu's callers)."""
    tb = crash.exception.__traceback__
    while tb is not None and tb.tb_frame is not crash.frame:
        tb = tb.tb_next
    return tb or crash.exception.__traceback__
