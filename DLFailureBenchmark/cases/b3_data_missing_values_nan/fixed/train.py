"""Exceptional data (regression MLP on a merged table): missing readings arrive as NaN features.

House-energy readings are joined from two sources; where the second source had no reading the
join leaves NaN in two columns, in a few percent of the rows. The script standardises with
statistics computed by `np.nanmean`/`np.nanstd` (so the statistics are fine) but feeds the NaNs
through; the first batch holding one makes the loss NaN and the script's own guard stops it.

Fixed: a missing reading is imputed with the column mean (0 after standardising), as the
evaluation script already does for the test rows.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

HPARAMS = dict(rows=1600, batch=50, epochs=5, lr=4e-3, width=32, checkpoint_every=40)
FEATURES = 8


def merged_table(seed, rows):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, FEATURES))
    weights = np.linspace(-1.0, 1.0, FEATURES)
    y = x @ weights + 0.5 * np.sin(2 * x[:, 0]) + 0.1 * rng.normal(size=rows)
    x = x * np.arange(1, FEATURES + 1) + 10.0  # raw units
    gaps = rng.random(rows) < 0.04
    x[gaps, 5] = np.nan  # the second source's columns, missing for these rows
    x[gaps, 6] = np.nan
    return x, y


def standardise(x, mean, std):
    return (x - mean) / std


class Regressor(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(),
                                 nn.Linear(width, 1))

    def forward(self, x):
        return self.net(x).squeeze(-1)


@torch.no_grad()
def test_mse(model, x, y):
    return float(((model(x) - y) ** 2).mean())


@daifu.transform
def train(model, optimizer, loader, test, ckpt_dir, start, stop):
    history = []
    step = 0
    for epoch in range(HPARAMS["epochs"]):
        for xb, yb in loader:
            if step >= stop:
                break
            if step < start:
                step += 1
                continue
            xb = torch.nan_to_num(xb, nan=0.0)
            loss = nn.functional.mse_loss(model(xb), yb)
            if not math.isfinite(loss.item()):
                raise FloatingPointError(f"loss is {loss.item()} at step {step}, epoch {epoch}")
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            history.append(loss.item())
            step += 1
            if step % HPARAMS["checkpoint_every"] == 0:
                save_checkpoint(ckpt_dir, step, model, optimizer)
    mse = test_mse(model, *test)
    return {"steps": len(history), "final_loss": float(np.mean(history[-10:])), "test_mse": mse,
            "test_mse_finite": float(math.isfinite(mse))}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    x, y = merged_table(seed, HPARAMS["rows"])
    mean, std = np.nanmean(x, 0), np.nanstd(x, 0)
    x = standardise(x, mean, std)
    xt, yt = merged_table(seed + 1, 400)
    xt = np.nan_to_num(standardise(xt, mean, std))  # the test rows are imputed by the evaluation script
    train_set = TensorDataset(torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32))
    loader = DataLoader(train_set, batch_size=HPARAMS["batch"], shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    test = (torch.tensor(xt, dtype=torch.float32), torch.tensor(yt, dtype=torch.float32))
    model = Regressor(HPARAMS["width"])
    optimizer = torch.optim.Adam(model.parameters(), lr=HPARAMS["lr"])
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "ckpt"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    total = HPARAMS["epochs"] * len(loader)
    return train(model, optimizer, loader, test, ckpt_dir, start, total if until is None else until)
