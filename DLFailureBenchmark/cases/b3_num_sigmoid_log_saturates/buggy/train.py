"""Numerics (loan-default logistic model): a hand-written binary cross-entropy on saturated sigmoids.

The script computes `p = sigmoid(logit)` and the loss as `-(y log p + (1 - y) log(1 - p))`. As
the model grows confident, some logits pass ~17 and `sigmoid` rounds to exactly 1.0 in float32:
`log(1 - p)` is -inf, times a zero label gives NaN, and the script's loss check raises.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

RUN = {"steps": 200, "batch": 64, "lr": 0.05, "save_every": 50}


def applications(seed, count):
    """Income, debt, age, prior defaults (raw units) and whether the loan defaulted."""
    g = torch.Generator().manual_seed(seed)
    income = 20 + 80 * torch.rand(count, generator=g)
    debt = 60 * torch.rand(count, generator=g)
    age = 20 + 50 * torch.rand(count, generator=g)
    prior = torch.poisson(torch.full((count,), 0.4), generator=g)
    risk = 0.12 * debt - 0.08 * income + 1.5 * prior + 0.5 * torch.randn(count, generator=g)
    x = torch.stack([income, debt, age, prior], 1)
    return (x - torch.tensor([60.0, 30.0, 45.0, 0.4])) / torch.tensor([23.0, 17.0, 14.0, 0.6]), (risk > 0).float()


def bce(p, y):
    return -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()


@torch.no_grad()
def accuracy(model, x, y):
    return float(((model(x).squeeze(1) > 0).float() == y).float().mean())


@daifu.transform
def train(model, optimizer, data, test, ckpt_dir, seed, start, stop):
    x, y = data
    g = torch.Generator().manual_seed(seed)
    losses = []
    for step in range(start, stop):
        rows = torch.randint(0, len(y), (RUN["batch"],), generator=g)
        logit = model(x[rows]).squeeze(1)
        loss = bce(torch.sigmoid(logit), y[rows])
        if not math.isfinite(loss.item()):
            raise ValueError(f"non-finite loss {loss.item()} at step {step}")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % RUN["save_every"] == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return {"steps": len(losses), "final_loss": sum(losses[-20:]) / 20, "accuracy": accuracy(model, *test)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=RUN["lr"])
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, applications(seed, 4000), applications(seed + 1, 1000), ckpt_dir, seed, start,
                 RUN["steps"] if until is None else until)
