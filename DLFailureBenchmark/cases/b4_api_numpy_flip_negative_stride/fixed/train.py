"""Small CNN on NumPy images with a horizontal-flip augmentation switched on after the first epoch.

The dataset keeps its images as NumPy arrays and flips with `img[:, :, ::-1]`, a view with a
negative stride; `torch.from_numpy` cannot wrap such a view. Epoch 0 runs without
augmentation; the first flipped image, early in epoch 1, stops the run.

Fixed: the flipped view is copied into a contiguous array before it becomes a tensor.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

OPTS = {"epochs": 5, "batch": 32, "n_train": 256, "n_test": 256, "lr": 2e-3, "aug_from_epoch": 1, "side": 12}


def arrows(seed: int, n: int, side: int) -> tuple[np.ndarray, np.ndarray]:
    """Triangles pointing up (label 0) or down (label 1) at random horizontal offsets, with noise."""
    rng = np.random.default_rng(seed)
    images = np.zeros((n, 1, side, side), dtype=np.float32)
    labels = rng.integers(0, 2, n)
    for i in range(n):
        cx = rng.integers(3, side - 3)
        for r in range(4):
            row = 3 + r if labels[i] == 0 else side - 4 - r
            images[i, 0, row, cx - r:cx + r + 1] = 1.0
        images[i, 0, :, :max(cx - 4, 0)] += 0.3  # a shade on the left: the flip moves it
    images += rng.normal(0, 0.3, images.shape).astype(np.float32)
    return images, labels


class ArrowDataset:
    def __init__(self, images: np.ndarray, labels: np.ndarray, seed: int) -> None:
        self.images, self.labels, self.seed = images, labels, seed
        self.epoch = 0
        self.augment = False
        self.flips_served = 0

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        img = self.images[i]
        flip = np.random.default_rng((self.seed, self.epoch, i)).random() < 0.5
        if self.augment and flip:
            img = np.ascontiguousarray(img[:, :, ::-1])
        tensor = torch.from_numpy(img)
        self.flips_served += int(self.augment and flip)
        return tensor, int(self.labels[i])


def collate(samples):
    return torch.stack([s[0] for s in samples]), torch.tensor([s[1] for s in samples])


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 8, 3, padding=1), nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 3 * 3, 2)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


@torch.no_grad()
def accuracy(model, images: np.ndarray, labels: np.ndarray) -> float:
    return (model(torch.from_numpy(images)).argmax(1).numpy() == labels).mean().item()


@daifu.transform
def train(model, optimizer, train_set, test_data, ckpt_dir, start, stop, seed):
    per_epoch = len(train_set) // OPTS["batch"]
    perm_rng = np.random.default_rng(seed)
    perms = [perm_rng.permutation(len(train_set)) for _ in range(OPTS["epochs"])]
    flipped = 0
    losses = []
    for step in range(start, stop):
        epoch, k = divmod(step, per_epoch)
        train_set.epoch = epoch
        train_set.augment = epoch >= OPTS["aug_from_epoch"]
        idx = perms[epoch][k * OPTS["batch"]:(k + 1) * OPTS["batch"]]
        xb, yb = collate([train_set[int(i)] for i in idx])
        loss = F.cross_entropy(model(xb), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % per_epoch == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return {"steps": len(losses), "test_acc": accuracy(model, *test_data), "flips": train_set.flips_served,
            "train_loss": sum(losses[-8:]) / max(len(losses[-8:]), 1)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    images, labels = arrows(seed, OPTS["n_train"] + OPTS["n_test"], OPTS["side"])
    train_set = ArrowDataset(images[:OPTS["n_train"]], labels[:OPTS["n_train"]], seed)
    test_images = images[OPTS["n_train"]:]
    test_flipped = np.ascontiguousarray(test_images[:, :, :, ::-1])  # the test set holds both orientations
    test_data = (np.concatenate([test_images, test_flipped]), np.concatenate([labels[OPTS["n_train"]:]] * 2))
    model = SmallCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=OPTS["lr"])
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "ckpt"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    total = OPTS["epochs"] * (OPTS["n_train"] // OPTS["batch"])
    return train(model, optimizer, train_set, test_data, ckpt_dir, start, total if until is None else until, seed)
