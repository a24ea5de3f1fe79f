"""Parcel inspection: parcel type (six classes) plus, from step 50, an auxiliary damage head.

Each parcel is a 28-dimensional sensor descriptor. A shared MLP body feeds a six-way type head
(cross-entropy) and a one-output damage head (sigmoid + BCE, weight 0.5), which joins the loss
after 50 steps once the body has learned the types. Scored on 1500 held-out parcels: type
accuracy and damage accuracy.

Fixed: the damage head's output has shape (batch, 1) and the damage labels shape (batch,); the
labels are given the same shape (`unsqueeze(1)`) before BCE.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

TYPES, DIM = 6, 28
STEPS, BATCH, CKPT_EVERY = 160, 64, 20
AUX_FROM, AUX_WEIGHT = 50, 0.5


def parcels(g, count):
    centres = torch.randn(TYPES, DIM, generator=torch.Generator().manual_seed(31)) * 0.7
    dent = torch.randn(DIM, generator=torch.Generator().manual_seed(32))
    y = torch.randint(0, TYPES, (count,), generator=g)
    damaged = (torch.rand(count, generator=g) < 0.3).long()
    x = centres[y] + 0.9 * damaged[:, None] * dent + torch.randn(count, DIM, generator=g)
    return x, y, damaged


class Inspector(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(DIM, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.types = nn.Linear(64, TYPES)
        self.damage = nn.Linear(64, 1)


@daifu.transform
def train(model, optimizer, test, ckpt_dir, start, stop, seed):
    for step in range(start, stop):
        x, y, damaged = parcels(torch.Generator().manual_seed(seed * 100_003 + step), BATCH)
        h = model.body(x)
        loss = F.cross_entropy(model.types(h), y)
        if step >= AUX_FROM:
            damage_prob = torch.sigmoid(model.damage(h))
            loss = loss + AUX_WEIGHT * F.binary_cross_entropy(damage_prob, damaged.float().unsqueeze(1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    with torch.no_grad():
        h = model.body(test[0])
        type_accuracy = (model.types(h).argmax(1) == test[1]).float().mean().item()
        damage_accuracy = ((model.damage(h).squeeze(1) > 0).long() == test[2]).float().mean().item()
    return {"steps": stop - start, "type_accuracy": type_accuracy, "damage_accuracy": damage_accuracy}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = Inspector()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    test = parcels(torch.Generator().manual_seed(seed * 7 + 4), 1500)
    return train(model, optimizer, test, ckpt_dir, start, STEPS if until is None else until, seed)
