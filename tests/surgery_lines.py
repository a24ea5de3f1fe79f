"""The lines a repair's new source changes or adds against a function's, for tests that name the edit."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any


def changed_lines(code: str, fn: Callable[..., Any]) -> list[str]:
    """The stripped lines of `code` that `fn`'s source does not hold."""
    old = {line.strip() for line in inspect.getsource(fn).splitlines()}
    return [line.strip() for line in code.splitlines() if line.strip() and line.strip() not in old]
