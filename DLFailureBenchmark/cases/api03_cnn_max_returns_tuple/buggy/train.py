"""API misuse (MNIST-style CNN): `Tensor.max(dim=...)` used as if it returned the indices.

`max(dim=1)` returns a named tuple (values, indices); comparing it with the label tensor gives
`False`, and the accuracy line fails on it at the first periodic check.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import cnn

STEPS, BATCH, EVAL_EVERY, CKPT_EVERY = 120, 32, 40, 25


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed):
    x_val, y_val = val
    losses = []
    for step in range(start, stop):
        x, y = cnn.batch(seed, step, BATCH)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % EVAL_EVERY == 0:
            with torch.no_grad():
                logits = model(x_val)
            pred = logits.max(dim=1)
            accuracy = (pred == y_val).float().mean().item()
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return cnn.metrics(model, val, losses, len(losses))


def main(workdir, seed=0, resume=None, until=None):
    model, optimizer = cnn.build(seed)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, cnn.validation(seed), ckpt_dir, start, STEPS if until is None else until, seed)
