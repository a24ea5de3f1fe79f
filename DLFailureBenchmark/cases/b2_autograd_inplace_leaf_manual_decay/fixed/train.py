"""Wide MLP on a small, noisy dataset, with decoupled weight decay after a warm-up.

300 training samples (16 features, 3 classes, 20% of the labels flipped) are drawn in batches of
32. The network (two hidden layers of 256) is trained with plain Adam; after a warm-up of 50 steps
the weights are shrunk by `lr * weight_decay` after every update, the decoupled decay of AdamW
("Decoupled Weight Decay Regularization"), written out by hand to keep Adam's own state untouched.

Fixed: the shrinking of the parameters (leaf tensors that require grad) is done under
`torch.no_grad()`, so autograd does not record it.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

FEATURES, CLASSES, TRAIN = 16, 3, 300
STEPS, BATCH, CKPT_EVERY = 160, 32, 20
LR, WEIGHT_DECAY, DECAY_FROM = 3e-3, 2.0, 50


def dataset(seed, count, flip):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(FEATURES, CLASSES, generator=torch.Generator().manual_seed(3))
    x = torch.randn(count, FEATURES, generator=g)
    y = (x @ w).argmax(1)
    flipped = torch.rand(count, generator=g) < flip
    y = torch.where(flipped, torch.randint(0, CLASSES, (count,), generator=g), y)
    return x, y


@daifu.transform
def train(model, optimizer, data, test, ckpt_dir, start, stop, seed):
    x_all, y_all = data
    for step in range(start, stop):
        idx = torch.randint(0, len(y_all), (BATCH,), generator=torch.Generator().manual_seed(seed * 7919 + step))
        loss = F.cross_entropy(model(x_all[idx]), y_all[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step >= DECAY_FROM:
            with torch.no_grad():
                for p in model.parameters():
                    p.mul_(1 - LR * WEIGHT_DECAY)
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    with torch.no_grad():
        accuracy = (model(test[0]).argmax(1) == test[1]).float().mean().item()
        weight_norm = sum(p.norm() ** 2 for p in model.parameters()).sqrt().item()
    return {"steps": stop - start, "accuracy": accuracy, "weight_norm": weight_norm}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(FEATURES, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, CLASSES))
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    data = dataset(seed * 10 + 1, TRAIN, 0.2)
    test = dataset(seed * 10 + 2, 2000, 0.0)
    return train(model, optimizer, data, test, ckpt_dir, start, STEPS if until is None else until, seed)
