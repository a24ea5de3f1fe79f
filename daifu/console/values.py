"""Live values on one line, as the console's `describe` shows them beside each line of the traceback.

Tensors and arrays are shown by shape, dtype and device, never by their numbers: those would fill the
screen, and computing them may cost a device synchronisation.
"""

from __future__ import annotations

import re
import sys
from typing import Any

_ITEMS = 8
"""Items of a list, tuple or dict shown before `...`."""
_DEPTH = 2
"""Container levels opened; deeper ones are shown by their plain repr, cut to better_exceptions' length."""


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
