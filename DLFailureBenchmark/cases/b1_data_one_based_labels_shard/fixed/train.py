"""Classifier trained on two exported shards of labelled rows (blind1).

The training rows come in two NumPy shards, written by two labelling campaigns: the first 60
steps read `shard_a.npz`, the last 60 `shard_b.npz`. Each shard holds the features and the class
of every row, five classes.

Reported: https://github.com/EricFillion/happy-transformer/issues/248

Fixed: the second shard numbers its classes from 1 (1 to 5); its labels are shifted to 0 to 4
when it is loaded.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import tabular

STEPS, BATCH, CKPT_EVERY = 120, 32, 20
SECOND_SHARD = 60


def write_shards(folder, seed):
    """What the two campaigns exported; the second campaign's tool numbers the classes from 1."""
    for name, first, offset in (("shard_a", 0, 0), ("shard_b", SECOND_SHARD, 1)):
        batches = [tabular.batch(seed, step, BATCH) for step in range(first, first + SECOND_SHARD)]
        np.savez(folder / f"{name}.npz", x=np.stack([x.numpy() for x, _ in batches]),
                 y=np.stack([y.numpy() + offset for _, y in batches]))


def load_shard(path):
    data = np.load(path)
    return torch.from_numpy(data["x"]), torch.from_numpy(data["y"])


@daifu.transform
def train(model, optimizer, shards, ckpt_dir, start, stop):
    losses = []
    for step in range(start, stop):
        xs, ys = shards[0] if step < SECOND_SHARD else shards[1]
        x, y = xs[step % SECOND_SHARD], ys[step % SECOND_SHARD]
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return losses


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = tabular.mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    start = load_checkpoint(resume, model, optimizer)
    workdir = Path(workdir)
    ckpt_dir = workdir / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    write_shards(workdir, seed)
    x_b, y_b = load_shard(workdir / "shard_b.npz")
    shards = [load_shard(workdir / "shard_a.npz"), (x_b, y_b - 1)]  # shard_b's classes are numbered from 1
    losses = train(model, optimizer, shards, ckpt_dir, start, STEPS if until is None else until)
    x, y = tabular.held_out(seed)
    with torch.no_grad():
        pred = model(x).argmax(1)
    recalls = [float((pred[y == c] == c).float().mean()) for c in range(tabular.CLASSES)]
    return {"steps": len(losses), "final_loss": sum(losses[-20:]) / len(losses[-20:]),
            "accuracy": float((pred == y).float().mean()), "min_class_recall": min(recalls)}
