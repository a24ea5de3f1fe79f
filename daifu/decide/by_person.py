"""What a decider notes when a person decides: where, whose suggestion it was, and how long the wait took.

The console, the approval prompt and the approval page each wait for a person. That wait is the
person's time, not DaiFu's: the record keeps it (`waited_ms`) apart from the restore time, and the
terminal says both. A decision a person took among the repair bot's suggestions shown to them
(`RepairContext.shown`) is credited to the bot as its suggester; any other, to the person
(`daifu.store.credit`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from daifu.core.decisions import Decision
from daifu.core.handling import RepairContext
from daifu.store.credit import BOT, PERSON

CREDIT_KEYS = ("decided_at", "suggested_by", "decided_by_person")
"""What `person_decided` notes: cleared before each decision is asked for (`forget`)."""


@contextmanager
def waiting(context: RepairContext) -> Iterator[None]:
    """Count the time inside as waiting for a person (`waited_ms` of the record), whatever comes of it."""
    started = time.perf_counter()
    try:
        yield
    finally:
        extra = context.entry.extra
        extra["waited_ms"] = round(float(extra.get("waited_ms", 0.0)) + (time.perf_counter() - started) * 1000, 3)


def person_decided(context: RepairContext, decision: Decision, where: str, name: str | None = None) -> None:
    """Note that a person decided `decision` at `where` (`console`, `approval prompt`, `approval page`),
    as `name` when the page gave one."""
    extra = context.entry.extra
    extra["decided_at"] = where
    extra["suggested_by"] = BOT if any(decision == shown for shown in context.shown) else PERSON
    if name:
        extra["decided_by_person"] = name


def forget(context: RepairContext) -> None:
    """Clear what an earlier offer noted (a decision the runtime refused): the next is credited afresh."""
    for key in CREDIT_KEYS:
        context.entry.extra.pop(key, None)
