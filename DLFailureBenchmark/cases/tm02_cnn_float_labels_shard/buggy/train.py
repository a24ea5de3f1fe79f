"""Tensor mismatch (MNIST-style CNN): float64 class labels from a NumPy shard.

The data are stored as NumPy shards; the second shard, used from step 60, was written by another
tool that saved the labels as float64. `F.cross_entropy` takes class indices only as int64.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import cnn
import numpy as np

STEPS, BATCH, EVAL_EVERY, CKPT_EVERY = 120, 32, 40, 25
SHARD_STEPS = 60


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed):
    x_val, y_val = val
    losses = []
    for step in range(start, stop):
        images, labels = cnn.numpy_batch(seed, step, BATCH)
        if step >= SHARD_STEPS:
            labels = labels.astype(np.float64)  # how the second shard stores them
        x = torch.from_numpy(images)
        y = torch.from_numpy(labels)
        loss = F.cross_entropy(model(x), y)
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
