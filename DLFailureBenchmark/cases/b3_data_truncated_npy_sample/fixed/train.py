"""Exceptional data (small CNN on spectrogram patches): one sample file on disk was cut short by a copy.

The patches are stored one `.npy` file each, as a preprocessing job wrote them; a sync to the
training machine was interrupted once and left one file truncated. `np.load` of that file fails
("cannot reshape array ...") when the sampler first reaches it, deep into the first epoch.

Fixed: `PatchFolder.__getitem__` reports a sample it cannot read and gives the next readable one
instead, so every batch stays full and the file is left on disk for inspection.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

parser = argparse.ArgumentParser()
parser.add_argument("--samples", type=int, default=480)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--lr", type=float, default=2e-3)
parser.add_argument("--save-every", type=int, default=20)
ARGS = parser.parse_args([])
CLASSES = 3
BROKEN = 137  # the file the interrupted sync left short


def write_patches(folder: Path, seed: int, count: int) -> list[tuple[Path, int]]:
    """The preprocessing job's output: one float32 (1, 16, 16) patch per file, and its class."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    rows = np.linspace(0.0, 1.0, 16)[:, None]
    index = []
    for i in range(count):
        label = int(rng.integers(0, CLASSES))
        band = np.exp(-((rows - (0.2 + 0.3 * label)) ** 2) / 0.01) * np.ones((16, 16))
        patch = (band + 0.6 * rng.normal(size=(16, 16))).astype(np.float32)[None]
        path = folder / f"patch_{i:05d}.npy"
        np.save(path, patch)
        index.append((path, label))
    return index


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


class PatchFolder:
    def __init__(self, index):
        self.index = index

    def __len__(self):
        return len(self.index)

    def __getitem__(self, i):
        for offset in range(len(self.index)):
            path, label = self.index[(i + offset) % len(self.index)]
            try:
                patch = np.load(path)
            except ValueError as error:
                print(f"unreadable sample {path.name}: {error}")
                continue
            return torch.from_numpy(patch), label
        raise RuntimeError("no readable sample")


class BandNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 8 * 8, CLASSES)

    def forward(self, x):
        return self.fc(torch.flatten(F.max_pool2d(F.relu(self.conv(x)), 2), 1))


def epoch_order(seed: int, epoch: int, size: int) -> list[int]:
    return torch.randperm(size, generator=torch.Generator().manual_seed(seed * 1000 + epoch)).tolist()


@torch.no_grad()
def accuracy(model, dataset):
    model.eval()
    images = torch.stack([dataset[i][0] for i in range(len(dataset))])
    labels = torch.tensor([dataset[i][1] for i in range(len(dataset))])
    model.train()
    return float((model(images).argmax(1) == labels).float().mean())


@daifu.transform
def train(model, optimizer, dataset, held_out, ckpt_dir, seed, start, stop):
    per_epoch = len(dataset) // ARGS.batch_size
    losses = []
    for step in range(start, stop):
        epoch, position = divmod(step, per_epoch)
        order = epoch_order(seed, epoch, len(dataset))
        picked = order[position * ARGS.batch_size:(position + 1) * ARGS.batch_size]
        samples = [dataset[i] for i in picked]
        images = torch.stack([image for image, _ in samples])
        labels = torch.tensor([label for _, label in samples])
        loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % ARGS.save_every == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    files = sum(1 for path, _ in dataset.index if path.exists())
    return {"steps": len(losses), "final_loss": float(np.mean(losses[-10:])),
            "accuracy": accuracy(model, held_out), "files_on_disk": files}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    workdir = Path(workdir)
    index = write_patches(workdir / "patches", seed, ARGS.samples)
    truncate(index[BROKEN][0])
    held_out = PatchFolder(write_patches(workdir / "held_out", seed + 1, 192))
    dataset = PatchFolder(index)
    model = BandNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=ARGS.lr)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = workdir / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    total = ARGS.epochs * (len(dataset) // ARGS.batch_size)
    return train(model, optimizer, dataset, held_out, ckpt_dir, seed, start, total if until is None else until)
