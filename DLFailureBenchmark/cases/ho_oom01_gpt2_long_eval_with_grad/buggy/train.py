"""Out-of-memory bug (GPT-2-style byte-level language model), holdout: an evaluation that keeps the autograd graph.

Every 50 steps the script measures the loss on long contexts (64 sequences of 128 bytes, the
length the model will serve). It switches the model to `eval()` but runs the forward pass with
autograd on, so every activation is kept for a backward pass that never comes: 8192 tokens of
activations do not fit on the GPU (simulated: 15.77 GiB, 10 MiB per token with autograd on).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import decoders
from DLFailureBenchmark.faults import MiB, SimulatedDevice

STEPS, BATCH, CONTEXT, CKPT_EVERY = 120, 16, 64, 40
LONG_EVAL_EVERY = 50


@daifu.transform
def train(model, optimizer, data, ckpt_dir, start, stop, seed):
    losses, long_losses = [], []
    for step in range(start, stop):
        x, y = decoders.batch(data, seed, step, BATCH, CONTEXT)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, decoders.VOCAB), y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % LONG_EVAL_EVERY == 0:
            x_long, y_long = decoders.batch(data, seed + 1, step, 4 * BATCH, 2 * CONTEXT)
            model.eval()
            logits_long = model(x_long)
            long_losses.append(F.cross_entropy(logits_long.reshape(-1, decoders.VOCAB), y_long.reshape(-1)).item())
            model.train()
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return decoders.metrics(model, data, seed, losses, len(losses))


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model, optimizer = decoders.build(seed, decoders.GPT2())
    SimulatedDevice(bytes_per_element=10 * MiB).attach(model)  # the GPU this script was written for
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, decoders.corpus(), ckpt_dir, start, STEPS if until is None else until, seed)
