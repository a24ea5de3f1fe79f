"""A module on a (pretend) device too small for a whole batch: the out-of-memory crash, on a CPU."""

from __future__ import annotations

import torch
from torch import nn


class SmallDevice(nn.Module):
    """`inner` on a device that holds `rows` input rows: more raise PyTorch's own OOM error (its message)."""

    def __init__(self, inner: nn.Module, rows: int) -> None:
        super().__init__()
        self.inner, self.rows = inner, rows

    def forward(self, x, *rest):
        if x.shape[0] > self.rows:
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {x.shape[0] * 2} GiB.")
        return self.inner(x, *rest)
