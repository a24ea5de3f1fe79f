"""API misuse (MNIST-style CNN): `.view` on a transposed batch.

Halfway through, a transposition augmentation is switched on; the per-sample normalisation that
follows flattens each image with `.view`, which a transposed (non-contiguous) tensor cannot give.

Fixed: `.reshape`, which copies a non-contiguous tensor.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import cnn

STEPS, BATCH, EVAL_EVERY, CKPT_EVERY = 120, 32, 40, 25
AUGMENT_FROM = 60


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed):
    x_val, y_val = val
    losses = []
    for step in range(start, stop):
        x, y = cnn.batch(seed, step, BATCH)
        if step >= AUGMENT_FROM:
            x = x.transpose(2, 3)
        flat = x.reshape(len(x), -1)
        x = (x - flat.mean(1).view(-1, 1, 1, 1)) / flat.std(1).view(-1, 1, 1, 1)
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
