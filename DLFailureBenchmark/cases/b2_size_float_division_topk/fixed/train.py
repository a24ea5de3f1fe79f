"""Online hard-example mining after a warm-up.

Eight classes of 24-dimensional samples. For the first 40 steps the MLP trains on plain batches of
64; from then on each step scores a pool of 256 fresh samples and trains on the quarter of the pool
with the highest loss (online hard-example mining, as in OHEM). Scored on 1000 held-out samples.

Fixed: the number of samples kept is an integer (`//`); `/` gives 64.0, which `topk` refuses.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

CLASSES, DIM = 8, 24
STEPS, BATCH, POOL, KEEP_FRACTION, CKPT_EVERY = 150, 64, 256, 4, 25
MINE_FROM = 40


def samples(g, count):
    centres = torch.randn(CLASSES, DIM, generator=torch.Generator().manual_seed(81)) * 0.55
    y = torch.randint(0, CLASSES, (count,), generator=g)
    return centres[y] + torch.randn(count, DIM, generator=g), y


@daifu.transform
def train(model, optimizer, test, ckpt_dir, start, stop, seed):
    mined = 0
    for step in range(start, stop):
        g = torch.Generator().manual_seed(seed * 100_003 + step)
        if step < MINE_FROM:
            x, y = samples(g, BATCH)
        else:
            pool_x, pool_y = samples(g, POOL)
            with torch.no_grad():
                pool_loss = F.cross_entropy(model(pool_x), pool_y, reduction="none")
            keep = len(pool_y) // KEEP_FRACTION
            hard = pool_loss.topk(keep).indices
            x, y = pool_x[hard], pool_y[hard]
            mined += 1
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    with torch.no_grad():
        accuracy = (model(test[0]).argmax(1) == test[1]).float().mean().item()
    return {"steps": stop - start, "accuracy": accuracy, "mined_steps": mined, "last_batch_size": len(y)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(DIM, 96), nn.ReLU(), nn.Linear(96, CLASSES))
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    test = samples(torch.Generator().manual_seed(seed * 7 + 4), 1000)
    return train(model, optimizer, test, ckpt_dir, start, STEPS if until is None else until, seed)
