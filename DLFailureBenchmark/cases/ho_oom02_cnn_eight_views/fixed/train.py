"""Out-of-memory bug (MNIST-style CNN), holdout: eight augmented views of every batch in one forward pass.

From step 60 each batch is trained on in eight views (the four flips and their transposes), all
concatenated: 256 images whose activations do not fit on the GPU (simulated: 15.77 GiB, about
80 MiB of activations per image).

Fixed: gradient accumulation over micro-batches of 32 images (the same gradient, an eighth of the
activations at a time).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import cnn
from DLFailureBenchmark.faults import MiB, SimulatedDevice

STEPS, BATCH, CKPT_EVERY = 120, 32, 25
VIEWS_FROM = 60


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed):
    losses = []
    for step in range(start, stop):
        x, y = cnn.batch(seed, step, BATCH)
        if step >= VIEWS_FROM:  # the four flips of each image and their transposes
            views = [x, x.flip(3), x.flip(2), x.flip(2, 3)]
            views += [view.transpose(2, 3) for view in views]
            x, y = torch.cat(views), y.repeat(len(views))
        optimizer.zero_grad()
        loss = 0.0
        for x_part, y_part in zip(x.split(BATCH), y.split(BATCH)):  # gradient accumulation
            part = F.cross_entropy(model(x_part), y_part) * len(y_part) / len(y)
            part.backward()
            loss += part.item()
        optimizer.step()
        losses.append(loss)
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return cnn.metrics(model, val, losses, len(losses))


def main(workdir, seed=0, resume=None, until=None):
    model, optimizer = cnn.build(seed)
    SimulatedDevice(bytes_per_element=80 * MiB / 784).attach(model)  # the GPU this script was written for
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, cnn.validation(seed), ckpt_dir, start, STEPS if until is None else until, seed)
