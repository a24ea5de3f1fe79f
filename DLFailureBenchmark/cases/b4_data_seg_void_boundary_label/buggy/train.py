"""Semantic segmentation with a small dilated-convolution network ("DeepLab-lite"), two annotation sources.

Most masks label every pixel 0 (background), 1 (disc) or 2 (square). The masks made with the
second annotation tool, like PASCAL VOC's, mark a 1-pixel band around each object as 255,
"void: do not score". The loss does not know about void pixels, and the first batch holding
such a mask (step 14) stops the run: target 255 is out of bounds for 3 classes.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

CLASSES, VOID, SIDE = 3, 255, 24
RUN = {"steps": 100, "batch": 8, "lr": 1e-2, "ckpt_every": 25, "void_from": 14}


def scene(gen: torch.Generator, with_void: bool):
    yy, xx = torch.meshgrid(torch.arange(SIDE), torch.arange(SIDE), indexing="ij")
    mask = torch.zeros(SIDE, SIDE, dtype=torch.long)
    cy, cx = torch.randint(6, SIDE - 6, (2,), generator=gen).tolist()
    disc = (yy - cy) ** 2 + (xx - cx) ** 2 <= 16
    sy, sx = torch.randint(3, SIDE - 8, (2,), generator=gen).tolist()
    square = (yy >= sy) & (yy < sy + 6) & (xx >= sx) & (xx < sx + 6)
    mask[disc] = 1
    mask[square & ~disc] = 2
    image = torch.stack([disc.float() * 0.9, square.float() * 0.9]) + 0.2 * torch.randn(
        2, SIDE, SIDE, generator=gen)
    if with_void:
        objects = (mask > 0).float()[None, None]
        grown = F.max_pool2d(objects, 3, stride=1, padding=1)[0, 0] > 0
        shrunk = -F.max_pool2d(-objects, 3, stride=1, padding=1)[0, 0] > 0
        mask[grown & ~shrunk] = VOID
    return image, mask


def batch(seed: int, step: int):
    gen = torch.Generator().manual_seed(seed * 7001 + step)
    items = [scene(gen, with_void=(step >= RUN["void_from"] and i % 2 == 0)) for i in range(RUN["batch"])]
    return torch.stack([a for a, _ in items]), torch.stack([m for _, m in items])


class DilatedFCN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(2, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 16, 3, padding=2, dilation=2), nn.ReLU(),
            nn.Conv2d(16, 16, 3, padding=4, dilation=4), nn.ReLU(), nn.Conv2d(16, 16, 1), nn.ReLU(),
            nn.Conv2d(16, CLASSES, 1))

    def forward(self, x):
        return self.body(x)


@torch.no_grad()
def mean_iou(model: nn.Module, images, masks) -> float:
    pred = model(images).argmax(1)
    scored = masks != VOID
    ious = []
    for c in range(1, CLASSES):
        inter = ((pred == c) & (masks == c) & scored).sum().item()
        union = (((pred == c) | (masks == c)) & scored).sum().item()
        ious.append(inter / max(union, 1))
    return sum(ious) / len(ious)


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed):
    losses = []
    void_batches = 0
    for step in range(start, stop):
        images, masks = batch(seed, step)
        logits = model(images)
        loss = F.cross_entropy(logits, masks)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        void_batches += int((masks == VOID).any())
        if (step + 1) % RUN["ckpt_every"] == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return {"steps": len(losses), "void_batches": void_batches, "miou": mean_iou(model, *val)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = DilatedFCN()
    optimizer = torch.optim.Adam(model.parameters(), lr=RUN["lr"])
    start = load_checkpoint(resume, model, optimizer)
    gen = torch.Generator().manual_seed(seed + 500)
    items = [scene(gen, with_void=(i % 2 == 0)) for i in range(40)]
    val = (torch.stack([a for a, _ in items]), torch.stack([m for _, m in items]))
    ckpt_dir = Path(workdir) / "ckpt"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, val, ckpt_dir, start, RUN["steps"] if until is None else until, seed)
