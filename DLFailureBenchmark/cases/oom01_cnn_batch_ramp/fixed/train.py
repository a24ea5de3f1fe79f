"""Out-of-memory bug (MNIST-style CNN): a batch-size ramp that overshoots the device's memory.

Large batches train faster once the loss has settled, so at step 60 the script multiplies its
batch size by 8. The GPU (simulated: 15.77 GiB, about 80 MiB of activations per image) holds
186 images; 256 raise `torch.OutOfMemoryError` in the forward pass.

Fixed: ramp by 4 (128 images), what the device holds.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import cnn
from DLFailureBenchmark.faults import MiB, SimulatedDevice

STEPS, BATCH, EVAL_EVERY, CKPT_EVERY = 120, 32, 40, 25
RAMP_AT = 60


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed):
    batch_size = BATCH if start < RAMP_AT else BATCH * 4
    losses = []
    for step in range(start, stop):
        if step == RAMP_AT:
            batch_size = batch_size * 4
        x, y = cnn.batch(seed, step, batch_size)
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
    SimulatedDevice(bytes_per_element=80 * MiB / 784).attach(model)  # the GPU this script was written for
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, cnn.validation(seed), ckpt_dir, start, STEPS if until is None else until, seed)
