"""One backend call per question: identical requests share one computation and, for a while, its answer.

Several ranks of a distributed job crash at the same statement at once, and a client may retry:
the first request starts the computation, the others await the same task. The key is the whole
request (see `repairbot.app`), so two crashes that differ in anything the backend reads never
share an answer. Nothing is locked while a computation runs: requests with distinct keys never
wait on each other, and a computation that fails leaves nothing behind (the next request tries
again). When every request waiting for a computation has gone (its client left, its deadline
passed), the computation is cancelled: one still queued for a worker never runs, so work nobody
waits for does not pile up under load. Answers are kept `ttl` seconds, at most `max_entries` of
them and `max_bytes` in all, oldest dropped first.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class _Kept(Generic[T]):
    at: float
    value: T
    size: int


@dataclass
class _Running(Generic[T]):
    task: asyncio.Task[T]
    waiters: int = 0


class AnswerCache(Generic[T]):
    """Answers by key, computed once however many ask at the same time.

    size: the bytes an answer counts for against `max_bytes`; an answer larger than `max_bytes`
    is returned but not kept. clock: for tests.
    """

    def __init__(
        self,
        size: Callable[[T], int],
        *,
        ttl: float = 30.0,
        max_entries: int = 256,
        max_bytes: int = 16 * 2**20,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl, self.max_entries, self.max_bytes = ttl, max_entries, max_bytes
        self._size = size
        self._clock = clock
        self._kept: OrderedDict[str, _Kept[T]] = OrderedDict()
        self._bytes = 0
        self._running: dict[str, _Running[T]] = {}

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def bytes(self) -> int:
        return self._bytes

    @property
    def running(self) -> int:
        """Computations in progress (each shared by all the requests for its key)."""
        return len(self._running)

    async def get(self, key: str, compute: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """The answer for `key`, and whether it was kept or shared (`True`) rather than computed for this call.

        Cancelling this call (a client gone, a deadline passed) cancels the computation only if
        no other call is waiting for it.
        """
        self._expire()
        kept = self._kept.get(key)
        if kept is not None:
            return kept.value, True
        running = self._running.get(key)
        shared = running is not None
        if running is None:
            running = _Running(asyncio.ensure_future(compute()))
            self._running[key] = running
            running.task.add_done_callback(lambda task: self._finished(key, task))
        running.waiters += 1
        try:
            return await asyncio.shield(running.task), shared
        finally:
            running.waiters -= 1
            if running.waiters == 0 and not running.task.done():
                running.task.cancel()

    def _finished(self, key: str, task: asyncio.Task[T]) -> None:
        del self._running[key]
        if task.cancelled() or task.exception() is not None:
            return  # a failure is not an answer: the next request computes again
        value = task.result()
        size = self._size(value)
        if size > self.max_bytes:
            return
        self._kept[key] = _Kept(self._clock(), value, size)
        self._bytes += size
        while len(self._kept) > self.max_entries or self._bytes > self.max_bytes:
            self._drop_oldest()

    def _expire(self) -> None:
        now = self._clock()
        while self._kept and now - next(iter(self._kept.values())).at > self.ttl:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        _, kept = self._kept.popitem(last=False)
        self._bytes -= kept.size
