"""Non-deterministic runtime error (GPT-2-style byte-level LM), holdout: a streamed batch's connection drops.

The training text is streamed from object storage, one batch per step (`decoders.batch` stands
for the read). At step 70 the connection is reset mid-transfer; read again, the batch arrives.
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


@daifu.transform
def train(model, optimizer, data, ckpt_dir, start, stop, seed):
    losses = []
    for step in range(start, stop):
        x, y = decoders.batch(data, seed, step, BATCH, CONTEXT)
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
    model, optimizer = decoders.build(seed, decoders.GPT2())
    start = load_checkpoint(resume, model, optimizer)
    faults.flaky("DLFailureBenchmark.hosts.decoders.batch", fail_on={70 - start + 1},
                 error=faults.connection_reset)  # the object store
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, decoders.corpus(), ckpt_dir, start, STEPS if until is None else until, seed)
