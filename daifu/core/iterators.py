"""Whether a loop's iterator can still give items after it raised, and which iterator it asks first.

A retry of a `for` header asks the same iterator for its next item (`Mode.LOOP_NEXT`). An iterator
object keeps its place when its `__next__` raises (a data loader's sampler has moved past the sample it
could not make), but a generator that raised is finished: asking it again raises `StopIteration`, the
loop ends, and everything it had left is passed over without a word. So is an iterator built on one
(`enumerate(batches())`, a data loader over a generator dataset): it asks the finished generator.

An item that failed to load can be loaded again only through an iterator that asks the one that
failed for its next item first, and keeps its own place when that raises (`asks_first`): otherwise
loading it again would put the loop out of step with what the wrapper had taken beside it.
"""

from __future__ import annotations

import gc
import inspect
from typing import Any

_LOOK = 200
"""Objects looked at for a generator under an iterator: enough for a loader's iterator, its fetcher and
its dataset's generator, bounded for an iterator that holds a large structure."""
_DEPTH = 4


def finished_generator(iterator: Any) -> bool:
    """Whether `iterator` is a finished generator, or holds one within a few references (the objects and
    dicts it refers to; never a container's many items beyond `_LOOK`)."""
    seen: set[int] = set()
    level = [iterator]
    for _ in range(_DEPTH):
        following: list[Any] = []
        for item in level:
            if id(item) in seen or len(seen) >= _LOOK:
                continue
            seen.add(id(item))
            finished = _finished(item)
            if finished is not None:
                if finished:
                    return True
                continue
            if isinstance(item, (str, bytes, int, float, type)) or inspect.ismodule(item):
                continue
            following += gc.get_referents(item)
        level = following
    return False


def _finished(item: Any) -> bool | None:
    """For a generator (or an asynchronous one): whether it is finished; `None` for anything else."""
    if inspect.isgenerator(item):
        return item.gi_frame is None
    if inspect.isasyncgen(item):
        return item.ag_frame is None
    return None


def asks_first(iterator: Any, inner: Any) -> bool:
    """Whether asking `iterator` for its next item asks `inner` for its next item before anything else,
    and gives it, at the same place of its own, what `inner` gives next.

    So are `inner` itself, an `enumerate` of such an iterator (its count moves only once the item came),
    and a `zip` whose first iterator is such (the ones after it are asked only once that one gave its
    item). Any other wrapper is not looked into: an allowlist, since a wrapper that keeps an item taken
    before `inner` raised would be put out of step."""
    while iterator is not inner:
        if type(iterator) not in (enumerate, zip):
            return False
        wrapped = iterator.__reduce__()[1]  # enumerate: (iterator, count); zip: its iterators, in order
        if not wrapped:
            return False
        iterator = wrapped[0]
    return True
