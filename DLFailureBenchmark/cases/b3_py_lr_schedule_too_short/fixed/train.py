"""Python error on a live object (CNN, warm-up + cosine learning-rate table): the table is too short.

The schedule is precomputed as one learning rate per step, for `len(dataset) // batch_size *
epochs` steps. The loader keeps the incomplete last batch, so each epoch has one step more than
counted: in the last epoch `schedule[step]` runs past the end of the list.

Fixed: the table has `len(loader) * epochs` entries, the steps the loader really gives.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

cfg = {"train_size": 1000, "batch_size": 64, "epochs": 3, "base_lr": 0.05, "warmup_steps": 6, "save_every": 16}


def warmup_cosine(total_steps, warmup_steps, base_lr):
    """One learning rate per optimizer step: linear warm-up, then cosine decay to zero."""
    rates = []
    for i in range(total_steps):
        if i < warmup_steps:
            rates.append(base_lr * (i + 1) / warmup_steps)
        else:
            progress = (i - warmup_steps) / max(1, total_steps - warmup_steps)
            rates.append(0.5 * base_lr * (1 + math.cos(math.pi * progress)))
    return rates


def stripes(seed, count):
    """8x8 images of horizontal (0) or vertical (1) stripes under noise."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 2, (count,), generator=g)
    wave = torch.sin(torch.arange(8.0) * 1.6)
    horizontal = wave[:, None].expand(8, 8)
    images = torch.where(labels[:, None, None] == 0, horizontal, horizontal.T)
    return (images + 1.2 * torch.randn(count, 8, 8, generator=g)).unsqueeze(1), labels


def make_model():
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                         nn.Linear(128, 2))


@torch.no_grad()
def accuracy(model, images, labels):
    return float((model(images).argmax(1) == labels).float().mean())


@daifu.transform
def train(model, optimizer, loader, schedule, test, ckpt_dir, start, stop):
    step = 0
    losses, rates = [], []
    for epoch in range(cfg["epochs"]):
        for images, labels in loader:
            if step >= stop:
                break
            if step < start:
                step += 1
                continue
            for group in optimizer.param_groups:
                group["lr"] = schedule[step]
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            rates.append(optimizer.param_groups[0]["lr"])
            step += 1
            if step % cfg["save_every"] == 0:
                save_checkpoint(ckpt_dir, step, model, optimizer)
    return {"steps": len(losses), "final_loss": sum(losses[-5:]) / 5, "accuracy": accuracy(model, *test),
            "final_lr": rates[-1], "peak_lr": max(rates)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    train_set = TensorDataset(*stripes(seed, cfg["train_size"]))
    test = stripes(seed + 1, 400)
    loader = DataLoader(train_set, batch_size=cfg["batch_size"], shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    total_steps = len(loader) * cfg["epochs"]
    schedule = warmup_cosine(total_steps, cfg["warmup_steps"], cfg["base_lr"])
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg["base_lr"], momentum=0.9)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    stop = len(loader) * cfg["epochs"] if until is None else until
    return train(model, optimizer, loader, schedule, test, ckpt_dir, start, stop)
