"""Tensor mismatch (MNIST-style CNN): weights sized for a full batch meet the epoch's short last batch.

The training set has 1000 images; batches of 32 leave 8 at the end of each epoch. The weighted
loss multiplies per-sample losses by a weight vector made once for 32 samples.

Fixed: `weights[: len(y)]`, as many weights as samples.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import cnn

STEPS, BATCH, CKPT_EVERY, TRAIN_SIZE = 128, 32, 25, 1000


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed):
    x_all, y_all = cnn.validation(seed + 1, size=TRAIN_SIZE)
    per_epoch = -(-TRAIN_SIZE // BATCH)
    weights = torch.ones(BATCH)
    weights[:4] = 2.0  # the first samples of each batch are the hand-checked ones
    losses = []
    for step in range(start, stop):
        first = (step % per_epoch) * BATCH
        x, y = x_all[first : first + BATCH], y_all[first : first + BATCH]
        per_sample = F.cross_entropy(model(x), y, reduction="none")
        loss = (per_sample * weights[: len(y)]).mean()
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
