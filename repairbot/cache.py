"""One backend call per crash: identical reports within a short window share one answer.

Several ranks of a distributed job crash at the same statement at once, and a client may retry;
each waits on a per-key `asyncio.Lock`, so the first computes and the rest read its answer.
"""

from __future__ import annotations

import asyncio
import time
from typing import Generic, TypeVar
from collections.abc import Awaitable, Callable

T = TypeVar("T")


class Coalescer(Generic[T]):
    """Answers kept `ttl` seconds by key; concurrent misses on one key wait for a single computation.

    Failed computations are not kept: the next caller tries again.
    """

    def __init__(self, ttl: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self._clock = clock
        self._answers: dict[str, tuple[float, T]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def get(self, key: str, compute: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """The answer for `key` and whether it was already there (`True`) or computed now."""
        self._expire()
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            kept = self._answers.get(key)
            if kept is not None:
                return kept[1], True
            value = await compute()
            self._answers[key] = (self._clock(), value)
            return value, False

    def _expire(self) -> None:
        now = self._clock()
        for key in [k for k, (at, _) in self._answers.items() if now - at > self.ttl]:
            del self._answers[key]
            lock = self._locks.get(key)
            if lock is not None and not lock.locked():
                del self._locks[key]
