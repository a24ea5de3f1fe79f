"""Generated stand-ins for the datasets and environments the external programs download or import.

The external cases are public training programs (pytorch/examples, nanoGPT) adapted to run here:
what they would download is generated in code with the same shapes and types, and nothing else.

- `digits`: MNIST as `torchvision.datasets.MNIST` holds it, `data` uint8 (N, 28, 28) and int64
  `targets`, drawn from the class templates of `cnn`;
- `colour_images`: the images of DCGAN's `fake` dataset, (N, 3, side, side) in [-1, 1] as after
  its `Normalize((0.5,)*3, (0.5,)*3)`;
- `sine_waves`: time_sequence_prediction's `generate_sine_wave.py`, with the sizes as arguments;
- `write_wikitext`: word_language_model's data folder (`train.txt`, `valid.txt`, `test.txt`),
  written by the Markov chain of `lm`;
- `write_char_dataset`: nanoGPT's `data/shakespeare_char` (`train.bin`, `val.bin` of uint16 ids
  and `meta.pkl`), the same text character by character;
- `GymCartPole`: the cart-pole of `rl` behind gymnasium's API (`reset` -> (obs, info), `step` ->
  five values, `spec.reward_threshold`), with an optional sensor glitch.
"""

from __future__ import annotations

import math
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from DLFailureBenchmark.hosts import cnn, lm, rl


def digits(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`count` MNIST-style digits as uint8 (count, 28, 28) images and int64 labels."""
    g = torch.Generator().manual_seed(seed)
    targets = torch.randint(0, cnn.CLASSES, (count,), generator=g)
    images = cnn.images(targets, g, noise=0.5).clamp(0.0, 1.0)[:, 0]
    return (images * 255).round().to(torch.uint8), targets


def colour_images(count: int, side: int, seed: int) -> torch.Tensor:
    """`count` colour images (count, 3, side, side) in [-1, 1]: smooth random patterns plus a little noise."""
    g = torch.Generator().manual_seed(seed)
    coarse = torch.rand(count, 3, 4, 4, generator=g)
    smooth = F.interpolate(coarse, size=(side, side), mode="bilinear", align_corners=False)
    return (2.0 * smooth - 1.0 + 0.1 * torch.randn(smooth.shape, generator=g)).clamp(-1.0, 1.0)


def sine_waves(n: int = 100, length: int = 1000, period: int = 20, seed: int = 2) -> np.ndarray:
    """`generate_sine_wave.py`: `n` sine waves of `length` samples, shifted at random, float64."""
    rng = np.random.RandomState(seed)
    x = np.empty((n, length), "int64")
    x[:] = np.array(range(length)) + rng.randint(-4 * period, 4 * period, n).reshape(n, 1)
    return np.sin(x / 1.0 / period).astype("float64")


def write_wikitext(folder: str | Path, train_words: int = 30_000, valid_words: int = 3_000) -> Path:
    """word_language_model's data folder: `train.txt`, `valid.txt` and `test.txt`; returns `folder`."""
    folder = Path(folder)
    lm.write_corpus(folder, train_words=train_words, valid_words=valid_words)
    (folder / "wiki.train.tokens").rename(folder / "train.txt")
    (folder / "wiki.valid.tokens").rename(folder / "valid.txt")
    (folder / "test.txt").write_text((folder / "valid.txt").read_text())
    return folder


def write_char_dataset(folder: str | Path, words: int = 40_000) -> Path:
    """nanoGPT's `data/shakespeare_char`: the text's characters as uint16 ids, split 90/10, and `meta.pkl`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lm.write_corpus(folder / "text", train_words=words, valid_words=10)
    data = (folder / "text" / "wiki.train.tokens").read_text()
    chars = sorted(set(data))
    stoi = {ch: i for i, ch in enumerate(chars)}
    ids = np.array([stoi[c] for c in data], dtype=np.uint16)
    split = int(len(ids) * 0.9)
    ids[:split].tofile(folder / "train.bin")
    ids[split:].tofile(folder / "val.bin")
    with open(folder / "meta.pkl", "wb") as handle:
        pickle.dump({"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": stoi}, handle)
    return folder


@dataclass(frozen=True)
class Spec:
    reward_threshold: float


class GymCartPole:
    """`gym.make('CartPole-v1')` for a program written against gymnasium: the `rl` cart-pole behind its API.

    `glitch=(episode, t)`: in that episode, the observation returned by step `t` is NaN, as a sensor
    that drops out for one reading. Episodes are counted from 1 by `reset()`; a seeded `reset(seed=...)`
    starts a new run, counted from 0 (gymnasium programs seed once, then reset every episode).
    """

    spec = Spec(reward_threshold=475.0)

    def __init__(self, seed: int, max_steps: int = 500, glitch: tuple[int, int] | None = None) -> None:
        self.env = rl.CartPole(seed, max_steps=max_steps)
        self.glitch = glitch
        self.episode = 0

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is not None:
            self.env.rng = np.random.default_rng(seed)
        self.episode = 0 if seed is not None else self.episode + 1
        return self.env.reset(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        state, reward, done = self.env.step(action)
        truncated = done and self.env.steps >= self.env.max_steps
        if self.glitch == (self.episode, self.env.steps):
            state = np.full_like(state, math.nan)
        return state, reward, done and not truncated, truncated, {}


class Digits(torch.utils.data.Dataset):
    """`torchvision.datasets.MNIST(root, train, transform=...)` for generated digits: `data`, `targets`, `transform`."""

    def __init__(self, count: int, seed: int, transform: Any = None) -> None:
        self.data, self.targets = digits(count, seed)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        image = self.data[index]
        return (self.transform(image) if self.transform else image), int(self.targets[index])


def to_tensor(image: torch.Tensor) -> torch.Tensor:
    """`transforms.ToTensor()` on a uint8 (H, W) image: float (1, H, W) in [0, 1]."""
    return image.float().div(255).unsqueeze(0)


def normalize(mean: float, std: float) -> Any:
    """`transforms.Compose([ToTensor(), Normalize((mean,), (std,))])`."""
    return lambda image: (to_tensor(image) - mean) / std
