"""Tensor mismatch (MNIST-style CNN), holdout: one-hot targets left as int64 for a float loss.

From step 60 the script fine-tunes with a one-vs-rest loss (each class scored by its own
sigmoid, as it will be for multi-label data). The targets are `F.one_hot(y, ...)`, which is
int64; `binary_cross_entropy_with_logits` needs float targets.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import cnn

STEPS, BATCH, CKPT_EVERY = 120, 32, 25
SIGMOID_FROM = 60


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed):
    losses = []
    for step in range(start, stop):
        x, y = cnn.batch(seed, step, BATCH)
        logits = model(x)
        if step < SIGMOID_FROM:
            loss = F.cross_entropy(logits, y)
        else:  # one-vs-rest: every class scored on its own
            targets = F.one_hot(y, cnn.CLASSES)
            loss = F.binary_cross_entropy_with_logits(logits, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return cnn.metrics(model, val, losses, len(losses))


def main(workdir, seed=0, resume=None, until=None):
    model, optimizer = cnn.build(seed)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, cnn.validation(seed), ckpt_dir, start, STEPS if until is None else until, seed)
