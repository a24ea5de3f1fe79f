"""API misuse (MNIST-style CNN), holdout: a low-resolution augmentation computes its size with `/`.

From step 60 every batch also trains on a blurred copy of itself: the images are shrunk to two
thirds of their side and blown up again. The small side is computed as `cnn.SIDE * 2 / 3`, a
float, one line above the call that uses it; `F.interpolate` wants integer sizes.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import cnn

STEPS, BATCH, CKPT_EVERY = 120, 32, 25
LOWRES_FROM = 60


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed):
    losses = []
    for step in range(start, stop):
        x, y = cnn.batch(seed, step, BATCH)
        if step >= LOWRES_FROM:
            low = cnn.SIDE * 2 / 3
            small = F.interpolate(x, size=(low, low), mode="bilinear", align_corners=False)
            blurred = F.interpolate(small, size=(cnn.SIDE, cnn.SIDE), mode="bilinear", align_corners=False)
            x, y = torch.cat([x, blurred]), torch.cat([y, y])
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
