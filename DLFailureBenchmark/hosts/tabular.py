"""Tabular data generated in code: classes as Gaussian clusters in a feature space, and a small MLP.

The blind set's programs are small training scripts of the kind people write for a CSV of
features: a few thousand rows, an MLP, Adam. Each class has a fixed centre (the same in every
run); the rows of a training step are drawn from `(seed, step)`, so a run restarted from a
checkpoint sees the batches it would have seen, and the held-out rows come from their own seed.
"""

from __future__ import annotations

import torch
from torch import nn

FEATURES = 16
CLASSES = 5
NOISE = 2.5
"""How far rows scatter around their centre: enough overlap that a model has to learn for a while."""


def centres(classes: int = CLASSES, features: int = FEATURES, scale: float = 1.6) -> torch.Tensor:
    """One centre per class, fixed across runs."""
    g = torch.Generator().manual_seed(20250101 + classes * 101 + features)
    return scale * torch.randn(classes, features, generator=g)


def rows(labels: torch.Tensor, generator: torch.Generator, features: int = FEATURES,
         classes: int = CLASSES, noise: float = NOISE) -> torch.Tensor:
    """Feature rows for `labels`: the class centre plus Gaussian noise."""
    base = centres(classes, features)[labels]
    return base + noise * torch.randn(base.shape, generator=generator)


def batch(seed: int, step: int, size: int, features: int = FEATURES, classes: int = CLASSES,
          noise: float = NOISE) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows of training step `step`: float32 features (size, features) and int64 labels."""
    g = torch.Generator().manual_seed(seed * 100_019 + step)
    labels = torch.randint(0, classes, (size,), generator=g)
    return rows(labels, g, features, classes, noise), labels


def held_out(seed: int, size: int = 600, features: int = FEATURES, classes: int = CLASSES,
             noise: float = NOISE) -> tuple[torch.Tensor, torch.Tensor]:
    """Held-out rows, never trained on."""
    g = torch.Generator().manual_seed(seed * 7 + 424_242)
    labels = torch.randint(0, classes, (size,), generator=g)
    return rows(labels, g, features, classes, noise), labels


def mlp(features: int = FEATURES, hidden: int = 32, out: int = CLASSES) -> nn.Sequential:
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, out))


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    was_training = model.training
    model.eval()
    try:
        return float((model(x).argmax(1) == y).float().mean())
    finally:
        model.train(was_training)
