"""Tensor mismatch (MNIST-style CNN): a Linear layer's input size left behind by a change of image size.

The loader was switched to 32x32 images (MNIST padded by two pixels on each side, as LeNet-5
wants); after two poolings the feature maps are 8x8, not 7x7, and `fc1` still takes 16*7*7.

Fixed: `cnn.Net(flat_features=16 * 8 * 8)` for 32x32 images.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import cnn

STEPS, BATCH, EVAL_EVERY, CKPT_EVERY = 120, 32, 40, 25
SIDE = 32


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed):
    x_val, y_val = val
    losses = []
    for step in range(start, stop):
        x, y = cnn.batch(seed, step, BATCH, side=SIDE)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return cnn.metrics(model, val, losses, len(losses))


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)  # the net is built before `build` seeds: seed it first, for a repeatable run
    model, optimizer = cnn.build(seed, cnn.Net(flat_features=16 * 8 * 8))
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    val = cnn.validation(seed, side=SIDE)
    return train(model, optimizer, val, ckpt_dir, start, STEPS if until is None else until, seed)
