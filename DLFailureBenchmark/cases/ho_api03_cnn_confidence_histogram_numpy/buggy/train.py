"""API misuse (MNIST-style CNN), holdout: a calibration log calls `.numpy()` on a tensor in the autograd graph.

Every 30 steps the script logs a histogram of the network's confidence on the training batch.
The confidences come from the training logits, which require gradients, and NumPy cannot take
them without `.detach()`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import cnn

STEPS, BATCH, LOG_EVERY, CKPT_EVERY = 120, 32, 30, 25


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed):
    losses, calibration = [], []
    for step in range(start, stop):
        x, y = cnn.batch(seed, step, BATCH)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % LOG_EVERY == 0:
            confidence = F.softmax(logits, dim=1).max(dim=1).values
            counts, _ = np.histogram(confidence.numpy(), bins=10, range=(0.0, 1.0))
            calibration.append(counts)
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return cnn.metrics(model, val, losses, len(losses))


def main(workdir, seed=0, resume=None, until=None):
    model, optimizer = cnn.build(seed)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, cnn.validation(seed), ckpt_dir, start, STEPS if until is None else until, seed)
