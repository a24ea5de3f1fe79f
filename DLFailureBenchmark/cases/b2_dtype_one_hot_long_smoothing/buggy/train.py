"""Scene classifier with one-vs-rest sigmoid outputs, label smoothing after a warm-up.

Scenes are 36-dimensional descriptors of ten scene types. The head has one sigmoid output per type
(the same head later serves a multi-label task), trained with BCE against one-hot targets. After
60 steps the targets are smoothed (epsilon 0.2), to keep the sigmoid outputs calibrated. Scored:
held-out accuracy and the mean confidence of the top output.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

TYPES, DIM = 10, 36
STEPS, BATCH, CKPT_EVERY = 200, 64, 25
SMOOTH_FROM, EPSILON = 60, 0.2


def scenes(g, count):
    centres = torch.randn(TYPES, DIM, generator=torch.Generator().manual_seed(23)) * 0.8
    y = torch.randint(0, TYPES, (count,), generator=g)
    return centres[y] + torch.randn(count, DIM, generator=g), y


@daifu.transform
def train(model, optimizer, test, ckpt_dir, start, stop, seed):
    for step in range(start, stop):
        x, y = scenes(torch.Generator().manual_seed(seed * 100_003 + step), BATCH)
        target = F.one_hot(y, TYPES)
        if step >= SMOOTH_FROM:
            target.mul_(1 - EPSILON).add_(EPSILON / TYPES)
        loss = F.binary_cross_entropy_with_logits(model(x), target.float())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    with torch.no_grad():
        probs = torch.sigmoid(model(test[0]))
    return {"steps": stop - start, "accuracy": (probs.argmax(1) == test[1]).float().mean().item(),
            "top_confidence": probs.max(1).values.mean().item()}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(DIM, 96), nn.ReLU(), nn.Linear(96, TYPES))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    test = scenes(torch.Generator().manual_seed(seed * 7 + 9), 1000)
    return train(model, optimizer, test, ckpt_dir, start, STEPS if until is None else until, seed)
