"""Exceptional data (MNIST-style CNN): a corrupted image makes the loss NaN.

One image of the batch at step 70 was damaged in storage (NaN pixels). The script checks that
the loss is finite before stepping the optimizer, so that one bad batch cannot spoil the weights.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import cnn

STEPS, BATCH, EVAL_EVERY, CKPT_EVERY = 120, 32, 40, 25
CORRUPT_AT = 70


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed):
    x_val, y_val = val
    losses = []
    for step in range(start, stop):
        x, y = cnn.batch(seed, step, BATCH)
        if step == CORRUPT_AT:
            x[3, 0, 5:9, 5:9] = float("nan")  # the damaged image
        loss = F.cross_entropy(model(x), y)
        assert torch.isfinite(loss), f"loss is {loss.item()} at step {step}"
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
