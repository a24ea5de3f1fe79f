"""Larger model (LLaMA-style byte-level language model): a context extension that runs out of memory.

A LLaMA-style decoder (RMSNorm, rotary position embeddings, SwiGLU, no biases) trains for 160
steps with a checkpoint every 40. At step 110 the script doubles its context length, as context
extension does, but keeps its batch size: 2048 tokens a batch do not fit on the GPU (simulated:
15.77 GiB, 10 MiB of activations per token).

Fixed: halve the batch when the context doubles (same tokens per step).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import decoders
from DLFailureBenchmark.faults import MiB, SimulatedDevice

STEPS, BATCH, CONTEXT, CKPT_EVERY = 160, 16, 64, 40
LONGER_AT = 110


@daifu.transform
def train(model, optimizer, data, ckpt_dir, start, stop, seed):
    losses = []
    batch_size, context = (BATCH, CONTEXT) if start < LONGER_AT else (BATCH // 2, 2 * CONTEXT)
    for step in range(start, stop):
        if step == LONGER_AT:
            context = 2 * context
            batch_size = batch_size // 2
        x, y = decoders.batch(data, seed, step, batch_size, context)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, decoders.VOCAB), y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return decoders.metrics(model, data, seed, losses, len(losses))


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model, optimizer = decoders.build(seed, decoders.Llama())
    SimulatedDevice(bytes_per_element=10 * MiB).attach(model)  # the GPU this script was written for
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, decoders.corpus(), ckpt_dir, start, STEPS if until is None else until, seed)
