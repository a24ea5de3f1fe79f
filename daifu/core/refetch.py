"""Loading again the batch a torch DataLoader failed to load, for a run resumed at its `for` header.

torch's single-process DataLoader iterator (`num_workers=0`) makes a batch in `_next_data`: it draws
the batch's indices from its sampler's iterator (`_next_index`), then fetches them from the dataset
and collates them (its fetcher), then pins them (`pin_memory`). When the fetch raises (a sample the
dataset's `__getitem__` or the collate function cannot make), the indices are drawn and gone: asking
the iterator for its next item makes the batch after, and the failed one is passed over. They are
still a local (`index`) of the `_next_data` frame that the exception's traceback holds. Given back to
the iterator (`Reload.give_back`), its next item is that batch again, made by its own fetcher,
pinning and count of items yielded: the loop trains on it, then on the batches after it, as a run
without the bad sample does.

Only torch's own single-process iterator of a map-style dataset is given indices back: a loader with
worker processes has sent the next batches' indices to its workers already, and an iterable-style
dataset's stream has moved past the batch. Everything is read by name from the live objects: torch is
never imported (a program that did not import it has no DataLoader to load a batch again).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any

from daifu.core.iterators import asks_first

_DATALOADER = "torch.utils.data.dataloader"


@dataclass(frozen=True)
class Reload:
    """The batch a DataLoader iterator failed to make: `index`, the indices it had drawn for it."""

    loader: Any
    index: Any

    @property
    def samples(self) -> int | None:
        """The samples of the batch (the indices a batch sampler drew); `None` when it cannot be told."""
        return len(self.index) if isinstance(self.index, (list, tuple)) else None

    def give_back(self) -> None:
        """Make the iterator's next item this batch again: its sampler's next indices are these."""
        self.loader._sampler_iter = _Again(self.loader, self.loader._sampler_iter, self.index)


class _Again:
    """A sampler's iterator with one batch's indices given back: it gives them, and steps aside, so
    that the iterator asks its own sampler again from the next batch on."""

    __slots__ = ("loader", "sampled", "index")

    def __init__(self, loader: Any, sampled: Any, index: Any) -> None:
        self.loader, self.sampled, self.index = loader, sampled, index

    def __iter__(self) -> _Again:
        return self

    def __next__(self) -> Any:
        self.loader._sampler_iter = self.sampled
        return self.index


def from_a_loader(error: BaseException, frame: FrameType) -> bool:
    """Whether `error` came out of a torch DataLoader iterator's `__next__` that `frame` called: a few
    attribute reads, asked before anything costlier."""
    module: Any = sys.modules.get(_DATALOADER)
    asked = _callees(error.__traceback__, frame)
    return module is not None and len(asked) >= 1 and asked[0].f_code is module._BaseDataLoaderIter.__next__.__code__


def reload(error: BaseException, frame: FrameType, iterator: Any) -> Reload | str:
    """The batch to load again when `error` came out of the loop's `iterator` at a `for` header of
    `frame`; else why it cannot be loaded again, in words (the repair's terminal line says it)."""
    if not from_a_loader(error, frame):
        return f"its iterator ({type(iterator).__name__}) is not a torch DataLoader's"
    module: Any = sys.modules[_DATALOADER]
    asked = _callees(error.__traceback__, frame)
    loader: Any = asked[0].f_locals.get("self")
    if isinstance(loader, module._MultiProcessingDataLoaderIter):
        return (f"the DataLoader loads its batches in {loader._num_workers} worker processes, which have moved past "
                "the one that failed")
    if type(loader) is not module._SingleProcessDataLoaderIter:
        return f"the DataLoader's iterator is a {type(loader).__name__}, not torch's own single-process one"
    if not asks_first(iterator, loader):
        wrapper = type(iterator).__name__
        return f"the loop takes the DataLoader's batches through a {wrapper}, which would be put out of step"
    if "_sampler_iter" not in vars(loader) or not hasattr(loader, "_next_index"):
        return "this torch's DataLoader iterator keeps its sampler where DaiFu does not look for it"
    if loader._dataset_kind != module._DatasetKind.Map:
        return "the DataLoader reads an iterable-style dataset, whose stream has moved past the batch"
    making = asked[1] if len(asked) > 1 else None
    if making is None or making.f_code is not module._SingleProcessDataLoaderIter._next_data.__code__ \
            or making.f_locals.get("self") is not loader or "index" not in making.f_locals:
        return "the DataLoader raised before its sampler gave the batch's indices"
    return Reload(loader, making.f_locals["index"])


def _callees(traceback: TracebackType | None, frame: FrameType) -> list[FrameType]:
    """The frames the traceback went through below `frame`, the one that crashed (two at most: the
    iterator's `__next__` and what it called)."""
    while traceback is not None and traceback.tb_frame is not frame:
        traceback = traceback.tb_next
    frames: list[FrameType] = []
    while traceback is not None and traceback.tb_next is not None and len(frames) < 2:
        traceback = traceback.tb_next
        frames.append(traceback.tb_frame)
    return frames
