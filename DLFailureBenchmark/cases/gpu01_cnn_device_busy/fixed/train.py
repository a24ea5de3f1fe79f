"""GPU contention (MNIST-style CNN): the device is taken by another process for a moment.

The GPU runs in exclusive-process mode; at step 50 another job holds it for 0.5 s, and `Tensor.to`
fails with "CUDA-capable device(s) is/are busy or unavailable" (simulated on the CPU).

Fixed: wait and retry the transfer (`retrying(..., wait=0.2)`).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import cnn
from DLFailureBenchmark.faults import BusyDevice
from DLFailureBenchmark.hosts.common import retrying

STEPS, BATCH, EVAL_EVERY, CKPT_EVERY = 120, 32, 40, 25


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed, device):
    losses = []
    for step in range(start, stop):
        x, y = cnn.batch(seed, step, BATCH)
        x, y = retrying(x.to, device, wait=0.2), retrying(y.to, device, wait=0.2)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return cnn.metrics(model, val, losses, len(losses))


def main(workdir, seed=0, resume=None, until=None):
    device = torch.device("cpu")  # "cuda" on the machine this script was written for
    model, optimizer = cnn.build(seed)
    start = load_checkpoint(resume, model, optimizer)
    BusyDevice(from_call=2 * (50 - start) + 1, seconds=0.5).install()  # the other job, from step 50
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    stop = STEPS if until is None else until
    return train(model, optimizer, cnn.validation(seed), ckpt_dir, start, stop, seed, device)
