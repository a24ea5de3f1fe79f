"""Autograd misuse above the loop (fine-tuning with an L2-SP penalty): the penalty's graph is built once.

The fine-tuning keeps the weights near the pretrained ones with a penalty `alpha * ||w - w0||^2`.
The script computes the penalty once, before the loop, and adds the same tensor to every step's
loss. The first backward frees its graph; the second step's backward goes through it again.

Fixed: the penalty is computed from the current weights in every step.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

ALPHA, BATCH, EPOCHS, LR, SAVE_EVERY = 0.05, 32, 3, 1e-2, 20


def sp_penalty(model, anchor):
    """Squared distance of the weights from the pretrained starting point (L2-SP)."""
    return sum(((p - a) ** 2).sum() for p, a in zip(model.parameters(), anchor))


def domain_data(seed, count, shift):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (count,), generator=g)
    centres = torch.tensor([[2.0, 0.0, 0.0, 1.0], [0.0, 2.0, 0.0, -1.0], [0.0, 0.0, 2.0, 0.0]]) + shift
    return centres[y] + 0.9 * torch.randn(count, 4, generator=g), y


def pretrained(seed):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 3))
    x, y = domain_data(seed + 50, 600, 0.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(60):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return model


@torch.no_grad()
def accuracy(model, x, y):
    return float((model(x).argmax(1) == y).float().mean())


@daifu.transform
def train(model, optimizer, anchor, data, test, ckpt_dir, seed, start, stop):
    x, y = data
    per_epoch = len(y) // BATCH
    losses = []
    for step in range(start, stop):
        epoch, i = divmod(step, per_epoch)
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed * 31 + epoch))
        rows = order[i * BATCH:(i + 1) * BATCH]
        penalty = ALPHA * sp_penalty(model, anchor)
        loss = F.cross_entropy(model(x[rows]), y[rows]) + penalty
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % SAVE_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    drift = float(sp_penalty(model, anchor))
    return {"steps": len(losses), "final_loss": sum(losses[-10:]) / 10, "accuracy": accuracy(model, *test),
            "drift": drift}


def main(workdir, seed=0, resume=None, until=None):
    model = pretrained(seed)
    anchor = [p.detach().clone() for p in model.parameters()]
    data, test = domain_data(seed, 960, 0.6), domain_data(seed + 1, 300, 0.6)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    total = EPOCHS * (len(data[1]) // BATCH)
    return train(model, optimizer, anchor, data, test, ckpt_dir, seed, start, total if until is None else until)
