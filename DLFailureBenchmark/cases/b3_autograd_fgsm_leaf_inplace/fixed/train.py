"""Autograd misuse (adversarial training, FGSM): the perturbation, a leaf that requires grad, updated in place.

Each batch is attacked with one FGSM step before the model trains on it: the perturbation
`delta` is a leaf tensor with `requires_grad=True`, its gradient is taken, and the script then
moves it with `delta += eps * delta.grad.sign()` outside `torch.no_grad()`, which autograd
refuses for a leaf that requires grad.

Fixed: the step on `delta` is taken under `torch.no_grad()`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

EPS, BATCH, STEPS, SAVE_EVERY, LR = 0.3, 64, 120, 40, 3e-3


def two_moons(seed, count):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 2, (count,), generator=g)
    angle = torch.rand(count, generator=g) * torch.pi
    x = torch.stack([torch.cos(angle), torch.sin(angle)], 1)
    x = torch.where(labels[:, None] == 1, torch.stack([1 - x[:, 0], 0.5 - x[:, 1]], 1), x)
    return x + 0.1 * torch.randn(count, 2, generator=g), labels


@torch.no_grad()
def accuracy(model, x, y):
    return float((model(x).argmax(1) == y).float().mean())


@daifu.transform
def train(model, optimizer, data, test, ckpt_dir, seed, start, stop):
    x, y = data
    g = torch.Generator().manual_seed(seed)
    losses, attacked = [], 0
    for step in range(start, stop):
        rows = torch.randint(0, len(y), (BATCH,), generator=g)
        xb, yb = x[rows], y[rows]
        delta = torch.zeros_like(xb, requires_grad=True)
        attack_loss = F.cross_entropy(model(xb + delta), yb)
        attack_loss.backward()
        with torch.no_grad():
            delta += EPS * delta.grad.sign()
        attacked += int(bool(delta.detach().abs().sum() > 0))
        loss = F.cross_entropy(model(xb + delta.detach()), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % SAVE_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    test_x, test_y = test
    delta = torch.zeros_like(test_x, requires_grad=True)
    F.cross_entropy(model(test_x + delta), test_y).backward()
    robust = accuracy(model, test_x + EPS * delta.grad.sign(), test_y)
    return {"steps": len(losses), "final_loss": sum(losses[-10:]) / 10, "accuracy": accuracy(model, test_x, test_y),
            "robust_accuracy": robust, "attacked_batches": attacked}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, two_moons(seed, 2000), two_moons(seed + 1, 500), ckpt_dir, seed, start,
                 STEPS if until is None else until)
