"""Regression MLP on a CSV export, with a guard against a diverging loss (blind1).

The rows come from `measurements.csv` (8 sensor columns and the target), read with NumPy and
trained on in order, 32 rows a step, for 120 steps over the 3200 rows. The script stops if the
loss stops being finite, as teams add after a run that diverged silently overnight.

Reported: https://github.com/radiasoft/sirepo/issues/2983
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

STEPS, BATCH, CKPT_EVERY, ROWS, COLUMNS = 120, 32, 20, 3200, 8
MISSING = {50 * 32 + 3: 2, 50 * 32 + 17: 5, 50 * 32 + 29: 0, 80 * 32 + 8: 6, 80 * 32 + 9: 1}
"""Row -> column where the sensor export wrote '?' (a dropped reading)."""


def write_csv(path, seed):
    rng = np.random.default_rng(seed + 11)
    x = rng.normal(size=(ROWS + 400, COLUMNS))
    w = np.linspace(-1.0, 1.0, COLUMNS)
    y = x @ w + 0.5 * np.sin(2 * x[:, 0]) + 0.1 * rng.normal(size=len(x))
    lines = [",".join(f"s{i}" for i in range(COLUMNS)) + ",target"]
    for row in range(len(x)):
        cells = [f"{v:.5f}" for v in x[row]] + [f"{y[row]:.5f}"]
        if row in MISSING:
            cells[MISSING[row]] = "?"
        lines.append(",".join(cells))
    path.write_text("\n".join(lines) + "\n")


def read_csv(path):
    table = np.genfromtxt(path, delimiter=",", skip_header=1, dtype=np.float32)
    return torch.from_numpy(table[:, :COLUMNS]), torch.from_numpy(table[:, COLUMNS:])


@daifu.transform
def train(model, optimizer, x_all, y_all, ckpt_dir, start, stop):
    losses, rows_trained = [], 0
    for step in range(start, stop):
        first = (step * BATCH) % ROWS
        xb, yb = x_all[first:first + BATCH], y_all[first:first + BATCH]
        loss = F.mse_loss(model(xb), yb)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"loss is {loss.item()} at step {step}")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        rows_trained += len(xb)
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return losses, rows_trained


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(COLUMNS, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    start = load_checkpoint(resume, model, optimizer)
    workdir = Path(workdir)
    ckpt_dir = workdir / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    write_csv(workdir / "measurements.csv", seed)
    x, y = read_csv(workdir / "measurements.csv")
    losses, rows_trained = train(model, optimizer, x[:ROWS], y[:ROWS], ckpt_dir, start,
                                 STEPS if until is None else until)
    with torch.no_grad():
        test_mse = float(F.mse_loss(model(x[ROWS:]), y[ROWS:]))
    return {"steps": len(losses), "final_loss": sum(losses[-20:]) / len(losses[-20:]), "test_mse": test_mse,
            "rows_trained": rows_trained}
