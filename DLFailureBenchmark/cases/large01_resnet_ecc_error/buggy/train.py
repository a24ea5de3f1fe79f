"""Larger model (ResNet-style, 32x32 colour images): a transient device error mid-training.

A ResNet for CIFAR-sized images (three stages of basic blocks) trains for 160 steps with a
checkpoint every 40. At step 110 one host-to-device copy fails with "uncorrectable ECC error
encountered"; the same copy succeeds when done again.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import vision
from DLFailureBenchmark import faults
from DLFailureBenchmark.hosts.common import retrying

STEPS, BATCH, CKPT_EVERY = 160, 32, 40


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed, device):
    losses = []
    for step in range(start, stop):
        x, y = vision.batch(seed, step, BATCH)
        x, y = x.to(device), y.to(device)
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
    device = torch.device("cpu")  # "cuda" on the machine this script was written for
    torch.manual_seed(seed)
    model, optimizer = vision.build(seed, vision.ResNet().to(device))
    start = load_checkpoint(resume, model, optimizer)
    faults.flaky("torch.Tensor.to", fail_on={2 * (110 - start) + 1}, error=faults.ecc_error, caller=__file__)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    stop = STEPS if until is None else until
    return train(model, optimizer, vision.validation(seed), ckpt_dir, start, stop, seed, device)
