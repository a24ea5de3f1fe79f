"""From an exception caught in a vaccinated frame to the instruction of that frame that raised it."""

from __future__ import annotations

import sys
from itertools import islice
from types import CodeType, FrameType, TracebackType


def raising_instruction(error: BaseException, frame: FrameType) -> tuple[int, int] | None:
    """The line, in the user's file, and the byte offset of the instruction of `frame` that raised
    `error`; `None` when the traceback does not pass through `frame` or names no line.

    The traceback's own `tb_lasti` is used, not the frame's: the frame has moved on to the
    handler (executing's note on `tb_lineno` versus `f_lineno`). Its line comes from the
    interpreter's own lookup; a column costs a walk of the code's position table (`column`).
    """
    tb: TracebackType | None = error.__traceback__
    while tb is not None and tb.tb_frame is not frame:
        tb = tb.tb_next
    if tb is None or tb.tb_lineno is None or tb.tb_lineno < 0:
        return None
    return tb.tb_lineno, tb.tb_lasti


def column(code: CodeType, offset: int) -> int | None:
    """The column of the instruction at byte `offset` of `code` (`None` before Python 3.11).

    Read from the position table up to that instruction, and kept nowhere: it is asked for only
    when statements share the crash's line, and a cache of whole tables would keep ~150 KiB per
    crashed code object for the rest of the run.
    """
    if sys.version_info < (3, 11) or offset < 0:
        return None
    for _line, _end, col, _end_col in islice(code.co_positions(), offset // 2, None):
        return col
    return None
