"""One deadline per crash: how long the service may still spend on an answer, and whether to stop now.

The client waits a bounded time for an answer (`CrashRequest.deadline_s`); past it, an answer is
worthless, because the client has already fallen back to its own rules engine. A `Deadline` is
made when the request arrives and handed to the backend, which sizes every model call by
`remaining()`; the HTTP layer calls `cancel()` when the client disconnects, so the backend stops
waiting for the model at once instead of at the deadline.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

DEFAULT_SECONDS = 45.0
ENV = "DAIFU_BOT_DEADLINE"


class Cancelled(RuntimeError):
    """The client went away: nobody will read the answer, and it must not be kept for others."""


class Deadline:
    """A point in time, and a cancellation flag that any thread may set.

    seconds: from now. clock: for tests; `time.monotonic` by default.
    """

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._end = clock() + seconds
        self._cancelled = threading.Event()

    def remaining(self) -> float:
        """Seconds left, never below zero."""
        return max(0.0, self._end - self._clock())

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    @property
    def over(self) -> bool:
        """Whether there is no point in waiting any longer: time is up or the client is gone."""
        return self.cancelled or self.remaining() <= 0.0


def server_default() -> float:
    """The server's deadline: `$DAIFU_BOT_DEADLINE` seconds, else 45.

    Raises `ValueError` naming the variable when its value is not a positive number.
    """
    raw = os.environ.get(ENV)
    if not raw:
        return DEFAULT_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise ValueError(f"{ENV} has value {raw!r}: expected a number of seconds between 0 and 3600.")
    return value


def for_request(requested: float | None, server: float) -> Deadline:
    """The deadline of one request: the client's, bounded by the server's own."""
    return Deadline(min(requested, server) if requested is not None else server)
