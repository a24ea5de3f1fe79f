"""Larger model (GPT-2-style byte-level language model): a collective times out mid-training.

A GPT-2-style decoder (learned positions, pre-LayerNorm blocks, GELU MLP, tied embeddings) trains
for 160 steps with a checkpoint every 40, averaging gradients over data-parallel workers with
`dist.all_reduce` (a one-process gloo group here). At step 110 one all-reduce times out.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import decoders
import torch.distributed as dist

from DLFailureBenchmark import faults
from DLFailureBenchmark.hosts.common import retrying

STEPS, BATCH, CONTEXT, CKPT_EVERY = 160, 16, 64, 40


@daifu.transform
def train(model, optimizer, data, ckpt_dir, start, stop, seed):
    losses = []
    for step in range(start, stop):
        x, y = decoders.batch(data, seed, step, BATCH, CONTEXT)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, decoders.VOCAB), y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        for parameter in model.parameters():
            dist.all_reduce(parameter.grad)
            parameter.grad /= dist.get_world_size()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return decoders.metrics(model, data, seed, losses, len(losses))


def main(workdir, seed=0, resume=None, until=None):
    if not dist.is_initialized():
        address = Path(workdir).resolve() / "process-group"
        dist.init_process_group("gloo", init_method=f"file://{address}", rank=0, world_size=1)
    torch.manual_seed(seed)
    model, optimizer = decoders.build(seed, decoders.GPT2())
    start = load_checkpoint(resume, model, optimizer)
    parameters = len(list(model.parameters()))
    faults.flaky("torch.distributed.all_reduce", fail_on={(110 - start) * parameters + 9}, error=faults.collective_timeout)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, decoders.corpus(), ckpt_dir, start, STEPS if until is None else until, seed)
