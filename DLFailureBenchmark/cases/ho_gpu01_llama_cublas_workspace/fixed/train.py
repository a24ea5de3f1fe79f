"""GPU contention (LLaMA-style byte-level LM), holdout: cuBLAS cannot allocate while another job holds the memory.

At step 70 another process on the shared GPU takes nearly all its memory for half a second;
meanwhile cuBLAS cannot allocate a handle's workspace and the forward pass fails with
CUBLAS_STATUS_ALLOC_FAILED (simulated on the CPU: `F.linear` fails for 0.5 s).

Fixed: wait and retry the forward pass (`retrying(model, x, wait=0.2)`).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import decoders
from DLFailureBenchmark import faults
from DLFailureBenchmark.hosts.common import retrying

STEPS, BATCH, CONTEXT, CKPT_EVERY = 120, 16, 64, 40
LINEAR_CALLS_PER_STEP = 16  # 3 blocks x (qkv, proj, gate, up, down) + head


@daifu.transform
def train(model, optimizer, data, ckpt_dir, start, stop, seed):
    losses = []
    for step in range(start, stop):
        x, y = decoders.batch(data, seed, step, BATCH, CONTEXT)
        logits = retrying(model, x, wait=0.2)
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
    start = load_checkpoint(resume, model, optimizer)
    faults.flaky("torch.nn.functional.linear", fail_on={LINEAR_CALLS_PER_STEP * (70 - start) + 1},
                 error=faults.cublas_alloc_failed, seconds=0.5)  # the other job, from step 70
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, decoders.corpus(), ckpt_dir, start, STEPS if until is None else until, seed)
