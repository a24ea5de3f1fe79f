"""What the console's `describe` prints: the function's source with the faulty line marked, then
the exception and a traceback that shows the values of the names on each line.

The source is the one that is running (the original, or the last surgery), not the transformed
code DaiFu compiled, and it is numbered as in the user's file. The traceback is better_exceptions'
with one change: tensors and arrays are shown by shape, dtype and device (`daifu.console.values`).
Without better_exceptions (the `daifu[console]` extra) the traceback is Python's own, and `describe`
says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import TracebackType

from daifu.console.colour import paint
from daifu.core.crash import Crash


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


def from_faulty_frame(crash: Crash) -> TracebackType | None:
    """The exception's traceback from the vaccinated frame down (the frames above are DaiFu's callers)."""
    tb = crash.exception.__traceback__
    while tb is not None and tb.tb_frame is not crash.frame:
        tb = tb.tb_next
    return tb or crash.exception.__traceback__
