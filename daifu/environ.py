"""Values derived from the process environment, derived again only when the environment changed.

A crash reads the settings and redacts its record with the secret environment values; decoding and
testing every variable again each time cost more than the rest of that work. CPython keeps the
environment as `os.environ._data`, a dict that one comparison in C finds unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class EnvironmentMemo(Generic[T]):
    """The last value derived from the environment and from `inputs` the caller names."""

    def __init__(self) -> None:
        self._seen: tuple[dict[Any, Any], Any, T] | None = None

    def get(self, derive: Callable[[], T], inputs: Any = None) -> T:
        """`derive()`'s value, computed again unless the environment and `inputs` (compared with
        `==`) are what they were last time. An exception from `derive` is not remembered."""
        raw = getattr(os.environ, "_data", None)
        seen = self._seen
        if seen is not None and seen[1] == inputs and seen[0] == raw:
            return seen[2]
        value = derive()
        self._seen = (dict(raw), inputs, value) if isinstance(raw, dict) else None
        return value
