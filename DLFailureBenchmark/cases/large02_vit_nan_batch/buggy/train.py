"""Larger model (ViT-style, 32x32 colour images): a corrupted sample mid-training.

A Vision Transformer (4x4 patches, 4 pre-norm encoder blocks) trains for 160 steps with a
checkpoint every 40. One image of the batch at step 110 holds NaN pixels; the script's check that
the loss is finite stops the run rather than let the optimizer spoil the weights.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import vision

STEPS, BATCH, CKPT_EVERY = 160, 32, 40
CORRUPT_AT = 110


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed):
    losses = []
    for step in range(start, stop):
        x, y = vision.batch(seed, step, BATCH)
        if step == CORRUPT_AT:
            x[5, :, 10:14, 10:14] = float("nan")  # the damaged image
        loss = F.cross_entropy(model(x), y)
        assert torch.isfinite(loss), f"loss is {loss.item()} at step {step}"
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
    model, optimizer = vision.build(seed, vision.ViT())
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, vision.validation(seed), ckpt_dir, start, STEPS if until is None else until, seed)
