"""Glyphs: a generated handwriting-like dataset, 28x28 grey images of ten classes, for the realistic programs.

Each class is a glyph of three pen strokes between points of a coarse lattice, the same in every
run. An image is its class's glyph written by a different hand: each stroke's ends moved by up to
two pixels, the pen thicker or thinner, the whole shifted by up to three pixels, with noise.
`Glyphs` hands the images out as a vision dataset does: `data` (uint8, N x 28 x 28), `targets`
(int64), and items `(image, label)` with the image a float tensor (1, 28, 28) in [0, 1], or what
`transform` makes of it. Nothing is downloaded: a split is drawn from its seed when it is built.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch.utils.data import Dataset

SIDE = 28
CLASSES = 10
STROKES = 3


def _lattice_strokes(seed: int = 271828) -> np.ndarray:
    """The glyph of each class: (CLASSES, STROKES, 2 ends, xy) in pixels, on a 5x5 lattice inside the image."""
    rng = np.random.default_rng(seed)
    points = 6.0 + 4.0 * rng.integers(0, 5, size=(CLASSES, STROKES, 2, 2))
    same = (points[:, :, 0] == points[:, :, 1]).all(axis=-1)
    points[:, :, 1, 0] += 4.0 * same  # a stroke that would be a dot becomes a short dash
    return points


GLYPHS = _lattice_strokes()


def render(ends: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Ink in [0, 1] of strokes `ends` (N, STROKES, 2, 2) drawn with pen `width` (N,): images (N, SIDE, SIDE)."""
    ys, xs = np.mgrid[0:SIDE, 0:SIDE].astype(np.float32) + 0.5
    pixels = np.stack([xs, ys], axis=-1)[None, None]  # 1, 1, SIDE, SIDE, 2
    start, end = ends[:, :, None, None, 0], ends[:, :, None, None, 1]
    direction = end - start
    along = ((pixels - start) * direction).sum(-1) / (direction**2).sum(-1)
    nearest = start + np.clip(along, 0.0, 1.0)[..., None] * direction
    distance = np.sqrt(((pixels - nearest) ** 2).sum(-1)).min(axis=1)  # to the closest stroke
    return np.exp(-((distance / width[:, None, None]) ** 2))


def draw(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One image per label, each written by its own hand: uint8 (N, SIDE, SIDE)."""
    count = len(labels)
    ends = GLYPHS[labels] + rng.uniform(-2.0, 2.0, size=(count, STROKES, 2, 2))
    ends += rng.integers(-3, 4, size=(count, 1, 1, 2))  # the whole glyph shifted
    ink = render(ends.astype(np.float32), rng.uniform(1.0, 2.0, size=count).astype(np.float32))
    ink += rng.normal(0.0, 0.2, size=ink.shape).astype(np.float32)
    return np.clip(ink * 255.0, 0, 255).round().astype(np.uint8)


class Glyphs(Dataset):
    """`size` images of the `train` or test split, drawn from `seed`; the two splits never share a hand."""

    def __init__(self, size: int, train: bool = True, seed: int = 0,
                 transform: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
        rng = np.random.default_rng([seed, 1 if train else 2])
        labels = rng.integers(0, CLASSES, size=size)
        self.data = torch.from_numpy(draw(labels, rng))
        self.targets = torch.from_numpy(labels).long()
        self.transform = transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = self.data[index].unsqueeze(0).float().div(255.0)
        if self.transform is not None:
            image = self.transform(image)
        return image, int(self.targets[index])
