"""From an exception caught in a vaccinated frame to the faulty statement of that frame."""

from __future__ import annotations

import sys
from types import CodeType, FrameType, TracebackType

_positions_cache: dict[CodeType, list[tuple[int | None, int | None]]] = {}


def _positions(code: CodeType) -> list[tuple[int | None, int | None]]:
    cached = _positions_cache.get(code)
    if cached is None:
        if sys.version_info >= (3, 11):
            cached = [(line, col) for line, _end, col, _end_col in code.co_positions()]
        else:
            cached = []
            for start, end, line in code.co_lines():
                cached.extend([(line, None)] * ((end - start) // 2))
        _positions_cache[code] = cached
    return cached


def raising_position(error: BaseException, frame: FrameType) -> tuple[int, int | None] | None:
    """Line and column, in the user's file, of the instruction of `frame` that raised `error`.

    The traceback's own `tb_lasti` is used, not the frame's: the frame has moved on to the
    handler (executing's note on `tb_lineno` versus `f_lineno`).
    """
    tb: TracebackType | None = error.__traceback__
    while tb is not None and tb.tb_frame is not frame:
        tb = tb.tb_next
    if tb is None:
        return None
    table = _positions(frame.f_code)
    index = tb.tb_lasti // 2
    if 0 <= index < len(table) and table[index][0] is not None:
        line, col = table[index]
        return line, col  # type: ignore[return-value]
    return tb.tb_lineno, None
