"""Defect detector (pass/fail) with a hand-written binary cross-entropy and a loss guard.

Parts are described by 16 gauge measurements; a two-layer MLP outputs the probability that a part is
defective. The loss is the binary cross-entropy written out from the probabilities, and the script
stops the run on a non-finite loss rather than let it corrupt the weights. 240 steps of Adam;
scored on 1000 held-out parts.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

DIM, STEPS, BATCH, CKPT_EVERY = 16, 240, 64, 25


def parts(g, count):
    axis = torch.randn(DIM, generator=torch.Generator().manual_seed(91))
    axis = axis / axis.norm()
    y = (torch.rand(count, generator=g) < 0.4).float()
    x = torch.randn(count, DIM, generator=g) + (2.0 * y - 1.0)[:, None] * 1.6 * axis
    return 4.0 * x, y


@daifu.transform
def train(model, optimizer, test, ckpt_dir, start, stop, seed):
    for step in range(start, stop):
        x, y = parts(torch.Generator().manual_seed(seed * 100_003 + step), BATCH)
        p = torch.sigmoid(model(x).squeeze(1))
        loss = -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite loss {loss.item()} at step {step}")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    with torch.no_grad():
        logits = model(test[0]).squeeze(1)
        finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    return {"steps": stop - start, "accuracy": ((logits > 0).float() == test[1]).float().mean().item(),
            "params_finite": int(finite)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(DIM, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    test = parts(torch.Generator().manual_seed(seed * 7 + 5), 1000)
    return train(model, optimizer, test, ckpt_dir, start, STEPS if until is None else until, seed)
