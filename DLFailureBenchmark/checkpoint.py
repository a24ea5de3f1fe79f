"""Periodic checkpoints, as real training scripts write them: `{model, optimizer, step}` every K steps.

The checkpoint-retry baseline restarts a program from `last.pt`, so every case saves through
`save_checkpoint` and resumes through `load_checkpoint`. Neither makes folders: a script that
forgets to create its checkpoint folder must crash the way `torch.save` makes it crash.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

LAST = "last.pt"


def save_checkpoint(folder: str | os.PathLike[str], step: int, model: torch.nn.Module,
                    optimizer: torch.optim.Optimizer) -> Path:
    """Write the state after `step` steps to `folder/last.pt` (replacing the previous one)."""
    path = Path(folder) / LAST
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, path)
    return path


def load_checkpoint(path: str | os.PathLike[str] | None, model: torch.nn.Module,
                    optimizer: torch.optim.Optimizer) -> int:
    """Restore `model` and `optimizer` from `path`; the number of steps it holds (0 when `path` is None)."""
    if path is None:
        return 0
    state: dict[str, Any] = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return int(state["step"])
