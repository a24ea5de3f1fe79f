"""Which rank of a `torch.distributed` job this process is, read without importing torch."""

from __future__ import annotations

import os
import sys


def active() -> bool:
    """Whether this process is one rank of an initialised, multi-rank process group."""
    dist = sys.modules.get("torch.distributed")
    return bool(dist and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1)


def rank() -> int | None:
    """This process's rank, when it runs under torch.distributed or a launcher that sets `RANK`."""
    if active():
        return int(sys.modules["torch.distributed"].get_rank())
    value = os.environ.get("RANK")
    return int(value) if value and value.isdigit() and int(os.environ.get("WORLD_SIZE", "1")) > 1 else None


def leader() -> int:
    """The rank that decides shared crashes and may open the console (`DAIFU_DIST_LEADER`, default 0)."""
    return int(os.environ.get("DAIFU_DIST_LEADER", "0"))
