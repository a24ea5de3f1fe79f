"""API misuse (ResNet-style, 32x32 colour images), holdout: `backward()` on a vector of per-sample losses.

From step 80 the script puts more weight on the hard examples: it asks `cross_entropy` for one
loss per sample, weights them by their (detached) softmax, and forgets to reduce the weighted
losses to one number, a line above `loss.backward()`.

Fixed: reduce the weighted losses, `(weights * per_sample).mean()`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import vision

STEPS, BATCH, CKPT_EVERY = 120, 16, 40
FOCUS_FROM = 80


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed):
    losses = []
    for step in range(start, stop):
        x, y = vision.batch(seed, step, BATCH)
        logits = model(x)
        if step < FOCUS_FROM:
            loss = F.cross_entropy(logits, y)
        else:  # focus on the hard examples: per-sample losses weighted by their size
            per_sample = F.cross_entropy(logits, y, reduction="none")
            weights = torch.softmax(per_sample.detach(), dim=0) * len(per_sample)
            loss = (weights * per_sample).mean()
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
