"""Exceptional data (MNIST-style CNN), holdout: a label outside the classes.

The labels come from an annotation export. One annotator marked an unreadable digit with
class 10 ("other"), which the ten-class network does not have; the batch of step 70 holds it and
`cross_entropy` rejects the target.

Fixed: leave out the samples whose label is not one of the classes.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import cnn

STEPS, BATCH, CKPT_EVERY = 120, 32, 25
OTHER_AT = 70


def annotated_batch(seed, step):
    """The images of step `step` with the annotators' labels (one 'other' mark, class 10, at step 70)."""
    x, y = cnn.batch(seed, step, BATCH)
    if step == OTHER_AT:
        y[11] = cnn.CLASSES
    return x, y


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed):
    losses = []
    for step in range(start, stop):
        x, y = annotated_batch(seed, step)
        known = y < cnn.CLASSES
        x, y = x[known], y[known]
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
