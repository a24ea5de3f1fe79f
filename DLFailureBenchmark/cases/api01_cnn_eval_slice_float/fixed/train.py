"""API misuse (MNIST-style CNN): the validation subset's size is computed with `/`.

Every 40 steps the script checks the accuracy on half of the validation set; in Python 3
`len(x_val) / 2` is a float, and a float cannot slice a tensor. The run dies at its first check.

Fixed: floor division, `len(x_val) // 2`.
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
    losses, checks = [], []
    for step in range(start, stop):
        x, y = cnn.batch(seed, step, BATCH)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % EVAL_EVERY == 0:
            half = len(x_val) // 2
            checks.append(cnn.accuracy(model, x_val[:half], y_val[:half]))
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return cnn.metrics(model, val, losses, len(losses))


def main(workdir, seed=0, resume=None, until=None):
    model, optimizer = cnn.build(seed)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, cnn.validation(seed), ckpt_dir, start, STEPS if until is None else until, seed)
