"""Energy-use regression from building sensors, with a NaN guard on the loss.

Each row has 12 sensor features and the building's energy use. An MLP is trained with MSE on
batches of 64 rows streamed from the sensor export, 180 steps of Adam; the script stops on a NaN
loss rather than train on it. Scored: RMSE on 1000 clean validation rows.

Fixed: rows with a missing (NaN) sensor reading are left out of the batch; the new gateway sends
them when a sensor drops out, and one such row makes the whole batch's loss NaN.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

FEATURES, STEPS, BATCH, CKPT_EVERY = 12, 180, 64, 20


def energy(x):
    w = torch.randn(FEATURES, generator=torch.Generator().manual_seed(101))
    return x @ w + 0.5 * torch.sin(2.0 * x[:, 0]) * x[:, 1]


def sensor_rows(g, count, dropouts=False):
    x = torch.randn(count, FEATURES, generator=g)
    y = energy(x) + 0.1 * torch.randn(count, generator=g)
    if dropouts:
        lost = torch.rand(count, generator=g) < 0.05
        sensor = torch.randint(0, FEATURES, (count,), generator=g)
        x[lost, sensor[lost]] = float("nan")
    return x, y


def export_batch(seed, step):
    """The rows of `step` from the sensor export."""
    return sensor_rows(torch.Generator().manual_seed(seed * 100_003 + step), BATCH, dropouts=step >= 70)


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed):
    rows = 0
    for step in range(start, stop):
        x, y = export_batch(seed, step)
        complete = ~torch.isnan(x).any(1)
        x, y = x[complete], y[complete]
        loss = F.mse_loss(model(x).squeeze(1), y)
        if torch.isnan(loss):
            raise ValueError(f"loss is NaN at step {step}")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        rows += len(y)
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    with torch.no_grad():
        rmse = F.mse_loss(model(val[0]).squeeze(1), val[1]).sqrt().item()
        finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    return {"steps": stop - start, "val_rmse": rmse, "params_finite": int(finite), "rows_trained": rows}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    val = sensor_rows(torch.Generator().manual_seed(seed * 7 + 1), 1000)
    return train(model, optimizer, val, ckpt_dir, start, STEPS if until is None else until, seed)
