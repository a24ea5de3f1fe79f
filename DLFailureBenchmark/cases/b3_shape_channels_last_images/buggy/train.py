"""Tensor shape made in a callee (satellite-tile CNN): the dataset hands over images channels-last.

Tiles are decoded the way image libraries give them, (height, width, channels) uint8 arrays;
`TileDataset.__getitem__` scales them to [0, 1] but does not move the channels first. The
first convolution then sees 16 "channels" (the width) where it expects 3.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

config = dict(tiles=768, side=16, batch_size=32, epochs=2, lr=2e-3, save_every=16)
LAND_USE = ("water", "forest", "field")


def decode_tiles(seed, count, side):
    """(count, side, side, 3) uint8 tiles: water is blue, forest dark green, fields light green/yellow."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(LAND_USE), count)
    colours = np.array([[40, 70, 160], [30, 90, 40], [150, 170, 60]], dtype=np.float64)
    tiles = colours[labels][:, None, None, :] + rng.normal(0, 45, (count, side, side, 3))
    return np.clip(tiles, 0, 255).astype(np.uint8), labels


class TileDataset(Dataset):
    def __init__(self, tiles, labels):
        self.tiles, self.labels = tiles, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        tile = torch.from_numpy(self.tiles[index]).float() / 255.0
        return tile, int(self.labels[index])


def build_model():
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(16, len(LAND_USE)),
    )


@torch.no_grad()
def evaluate(model, images, labels):
    model.eval()
    correct = (model(images).argmax(1) == labels).float().mean()
    model.train()
    return float(correct)


@daifu.transform
def train(model, optimizer, loader, validation, ckpt_dir, start, stop):
    criterion = nn.CrossEntropyLoss()
    losses = []
    step = 0
    for epoch in range(config["epochs"]):
        for images, labels in loader:
            if step >= stop:
                break
            if step < start:
                step += 1
                continue
            logits = model(images)
            loss = criterion(logits, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            step += 1
            if step % config["save_every"] == 0:
                save_checkpoint(ckpt_dir, step, model, optimizer)
    return {"steps": len(losses), "final_loss": float(np.mean(losses[-8:])), "accuracy": evaluate(model, *validation)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    tiles, labels = decode_tiles(seed, config["tiles"], config["side"])
    val_tiles, val_labels = decode_tiles(seed + 1, 300, config["side"])
    # the validation tensors come from the evaluation team's cache, already (N, 3, H, W)
    validation = (torch.from_numpy(val_tiles).float().permute(0, 3, 1, 2) / 255.0, torch.from_numpy(val_labels))
    loader = DataLoader(TileDataset(tiles, labels), batch_size=config["batch_size"], shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    model = build_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    stop = config["epochs"] * len(loader) if until is None else until
    return train(model, optimizer, loader, validation, ckpt_dir, start, stop)
