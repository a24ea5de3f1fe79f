"""Ten-class classifier trained shard by shard from `.npz` files on disk.

The training set is four shards of 1280 samples (20 features) in `data/shard_<k>.npz`; the first
two were exported by the old pipeline, the last two by the new one. The script loads a shard when
it reaches it and takes batches of 32 in order. Scored on 1000 held-out samples.

Fixed: the labels are flattened when a shard is loaded; the new pipeline stores them as a (N, 1)
column, which `cross_entropy` reads as multi-target.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

CLASSES, DIM, SHARDS, SHARD_SIZE = 10, 20, 4, 1280
BATCH, CKPT_EVERY = 32, 20
PER_SHARD = SHARD_SIZE // BATCH


def samples(g, count):
    centres = torch.randn(CLASSES, DIM, generator=torch.Generator().manual_seed(41)) * 0.6
    y = torch.randint(0, CLASSES, (count,), generator=g)
    return centres[y] + torch.randn(count, DIM, generator=g), y


def export_shards(folder, seed):
    """Write the training set as it sits on disk: four shards, two from each export pipeline."""
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(SHARDS):
        x, y = samples(torch.Generator().manual_seed(seed * 1000 + k), SHARD_SIZE)
        labels = y.numpy() if k < 2 else y.numpy()[:, None]
        np.savez(folder / f"shard_{k}.npz", x=x.numpy(), y=labels)


@daifu.transform
def train(model, optimizer, data_dir, test, ckpt_dir, start, stop, seed):
    loaded, rows = -1, 0
    for step in range(start, stop):
        shard, i = divmod(step, PER_SHARD)
        if shard != loaded:
            with np.load(data_dir / f"shard_{shard}.npz") as arrays:
                xs, ys = torch.from_numpy(arrays["x"]), torch.from_numpy(arrays["y"]).reshape(-1)
            loaded = shard
        x, y = xs[i * BATCH:(i + 1) * BATCH], ys[i * BATCH:(i + 1) * BATCH]
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        rows += len(x)
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    with torch.no_grad():
        predictions = model(test[0]).argmax(1)
    return {"steps": stop - start, "accuracy": (predictions == test[1]).float().mean().item(),
            "class0_share": (predictions == 0).float().mean().item(), "rows_trained": rows}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(DIM, 64), nn.ReLU(), nn.Linear(64, CLASSES))
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    data_dir = Path(workdir) / "data"
    export_shards(data_dir, seed)
    test = samples(torch.Generator().manual_seed(seed * 7 + 6), 1000)
    return train(model, optimizer, data_dir, test, ckpt_dir, start, SHARDS * PER_SHARD if until is None else until, seed)
