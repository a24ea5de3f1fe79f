"""MNIST-style digits: ten classes of 28x28 grey images made from fixed stroke templates plus noise.

Each training step's batch is generated from `(seed, step)`, so a run restarted from a checkpoint
sees the batches it would have seen. `Net` is the classic two-conv MNIST network.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from DLFailureBenchmark.hosts.common import tail_mean

SIDE = 28
CLASSES = 10


def templates(side: int = SIDE) -> torch.Tensor:
    """One smooth random pattern per class, the same in every run."""
    g = torch.Generator().manual_seed(20240601)
    coarse = torch.rand(CLASSES, 1, 7, 7, generator=g)
    return F.interpolate(coarse, size=(side, side), mode="bilinear", align_corners=False)


_TEMPLATES: dict[int, torch.Tensor] = {}


def images(labels: torch.Tensor, generator: torch.Generator, side: int = SIDE, noise: float = 1.5) -> torch.Tensor:
    if side not in _TEMPLATES:
        _TEMPLATES[side] = templates(side)
    base = _TEMPLATES[side][labels]
    return base + noise * torch.randn(base.shape, generator=generator)


def batch(seed: int, step: int, size: int, side: int = SIDE) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch of training step `step`: images (size, 1, side, side) and int64 labels."""
    g = torch.Generator().manual_seed(seed * 100_003 + step)
    labels = torch.randint(0, CLASSES, (size,), generator=g)
    return images(labels, g, side), labels


def numpy_batch(seed: int, step: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The same batch as NumPy arrays, as a data pipeline that stores shards with NumPy hands it over."""
    x, y = batch(seed, step, size)
    return x.numpy(), y.numpy()


def validation(seed: int, size: int = 512, side: int = SIDE) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed * 7 + 99_991)
    labels = torch.randint(0, CLASSES, (size,), generator=g)
    return images(labels, g, side), labels


class Net(nn.Module):
    """conv(1, 8) - pool - conv(8, 16) - pool - fc(16*7*7, 64) - fc(64, 10), for 28x28 images."""

    def __init__(self, flat_features: int = 16 * 7 * 7) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc1 = nn.Linear(flat_features, 64)
        self.fc2 = nn.Linear(64, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc2(F.relu(self.fc1(x)))


def build(seed: int, model: nn.Module | None = None, lr: float = 2e-3) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = model or Net()
    return model, torch.optim.Adam(model.parameters(), lr=lr)


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    try:
        return float((model(x).argmax(1) == y).float().mean())
    finally:
        model.train()


def metrics(model: nn.Module, val: tuple[torch.Tensor, torch.Tensor], losses: list[float],
            steps: int) -> dict[str, float]:
    return {"steps": steps, "final_loss": tail_mean(losses), "accuracy": accuracy(model, *val)}
