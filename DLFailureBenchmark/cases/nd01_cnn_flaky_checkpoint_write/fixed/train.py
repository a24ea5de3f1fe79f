"""Non-deterministic runtime error (MNIST-style CNN): one checkpoint write fails on a network file system.

The third call to `torch.save` (the checkpoint of step 75) fails with EIO, as writes to an
overloaded NFS server sometimes do; the same write a moment later succeeds.

Fixed: retry the save (`retrying(save_checkpoint, ...)`).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import cnn
from DLFailureBenchmark import faults
from DLFailureBenchmark.hosts.common import retrying

STEPS, BATCH, EVAL_EVERY, CKPT_EVERY = 120, 32, 40, 25


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed):
    x_val, y_val = val
    losses = []
    for step in range(start, stop):
        x, y = cnn.batch(seed, step, BATCH)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % CKPT_EVERY == 0:
            retrying(save_checkpoint, ckpt_dir, step + 1, model, optimizer)
    return cnn.metrics(model, val, losses, len(losses))


def main(workdir, seed=0, resume=None, until=None):
    faults.flaky("torch.save", fail_on={3}, error=faults.io_error)  # the file system of this cluster
    model, optimizer = cnn.build(seed)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, cnn.validation(seed), ckpt_dir, start, STEPS if until is None else until, seed)
