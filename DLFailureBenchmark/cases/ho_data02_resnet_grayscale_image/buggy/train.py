"""Exceptional data (ResNet-style, 32x32 colour images), holdout: one grayscale image among colour ones.

The samples of a batch are decoded one by one and stacked. One file in the batch of step 90 is
a grayscale image, decoded to a single channel; `torch.stack` cannot put a (1, 32, 32) image
next to (3, 32, 32) ones.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import vision

STEPS, BATCH, CKPT_EVERY = 120, 16, 40
GRAYSCALE_AT = 90


def decoded_samples(seed, step):
    """The (image, label) pairs of step `step`, as a decoder returns them (one grayscale file at step 90)."""
    x, y = vision.batch(seed, step, BATCH)
    samples = list(zip(x, y))
    if step == GRAYSCALE_AT:
        samples[7] = (x[7].mean(dim=0, keepdim=True), y[7])
    return samples


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed):
    losses = []
    for step in range(start, stop):
        samples = decoded_samples(seed, step)
        x = torch.stack([image for image, _ in samples])
        y = torch.stack([label for _, label in samples])
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return vision.metrics(model, val, losses, len(losses))


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model, optimizer = vision.build(seed, vision.ResNet())
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, vision.validation(seed), ckpt_dir, start, STEPS if until is None else until, seed)
