"""better_exceptions' traceback with the values of the names on each line, as `describe` shows it.

Tensors and arrays are shown by shape, dtype and device (`daifu.console.values.value_text`), and
the faulty frame's line is read from the running source. Imported only when a console describes
a crash, and only where better_exceptions is installed (the `daifu[console]` extra).
"""

from __future__ import annotations

import ast
from types import TracebackType
from typing import Any

import better_exceptions  # type: ignore[import-untyped]
from better_exceptions.formatter import ExceptionFormatter  # type: ignore[import-untyped]

from daifu.console.values import value_text
from daifu.core.crash import Crash


class ValueFormatter(ExceptionFormatter):  # type: ignore[misc]
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
