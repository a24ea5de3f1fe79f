"""What the console's `describe` prints: the function's source with the faulty line marked, then
the exception and a traceback that shows the values of the names on each line.

The source is the one that is running (the original, or the last surgery), not the transformed
code DaiFu compiled, and it is numbered as in the user's file. The traceback is better_exceptions'
with one change: tensors and arrays are shown by shape, dtype and device, since their numbers would
fill the screen and computing them may cost a device synchronisation.
"""

from __future__ import annotations

import ast
import re
import sys
from types import TracebackType
from typing import Any
from collections.abc import Iterator

import better_exceptions  # type: ignore[import-untyped]
from better_exceptions.formatter import ExceptionFormatter  # type: ignore[import-untyped]

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
    formatter = _Formatter(crash, colour)
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


class _Formatter(ExceptionFormatter):  # type: ignore[misc]
    """better_exceptions' formatter, with brief tensors and the running source for the faulty frame."""

    def __init__(self, crash: Crash, colour: bool) -> None:
        super().__init__(
            colored=colour,
            theme=better_exceptions.THEME,
            max_length=better_exceptions.MAX_LENGTH,
            pipe_char=better_exceptions.PIPE_CHAR,
            cap_char=better_exceptions.CAP_CHAR,
        )
        self._crash = crash

    def format_value(self, v: Any) -> str:
        try:
            text = value_text(v)
        except Exception:  # a user __repr__ that fails; as better_exceptions says it
            text = f"<unprintable {type(v).__name__} object>"
        limit = self._max_length
        return text if limit is None or len(text) <= limit else text[:limit] + "..."

    def get_traceback_information(self, tb: TracebackType) -> tuple[Any, ...]:
        """As better_exceptions does, except that after a surgery the faulty frame's line is read from
        the running source, not from the file, which still holds the old text."""
        filename, lineno, function, source, coloured, values = super().get_traceback_information(tb)
        running = self._running_line(tb)
        if running is None or running == source:
            return filename, lineno, function, source, coloured, values
        try:
            tree = ast.parse(running, mode="exec")
        except SyntaxError:
            return filename, lineno, function, running, running, []
        return (
            filename,
            lineno,
            function,
            running,
            self.colorize_tree(tree, running),
            self.get_relevant_values(running, tb.tb_frame, tree),
        )

    def _running_line(self, tb: TracebackType) -> str | None:
        crash = self._crash
        if tb.tb_frame is not crash.frame:
            return None
        lines = crash.source.splitlines()
        index = tb.tb_lineno - crash.first_lineno
        return lines[index].strip() if 0 <= index < len(lines) else None
