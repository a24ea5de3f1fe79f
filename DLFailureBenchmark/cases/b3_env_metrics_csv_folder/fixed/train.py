"""Environment (CNN with a CSV metrics writer): the writer appends to a file in a folder nobody made.

`CsvLogger` appends one row per logging step to `<run>/logs/metrics.csv`. The run folder exists
(checkpoints go there) but `logs/` was never created, so the first `open(..., "a")` fails with
FileNotFoundError at step 10.

Fixed: `CsvLogger` makes its folder when it is created.
"""

from __future__ import annotations

import csv
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

STEPS, BATCH, LOG_EVERY, SAVE_EVERY = 100, 32, 10, 25


class CsvLogger:
    def __init__(self, path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, **row):
        new = not self.path.exists()
        with open(self.path, "a", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(row))
            if new:
                writer.writeheader()
            writer.writerow(row)


def digits(seed, step, size):
    g = torch.Generator().manual_seed(seed * 10_007 + step)
    labels = torch.randint(0, 4, (size,), generator=g)
    grid = torch.zeros(size, 1, 8, 8)
    for k in range(4):
        grid[labels == k, 0, 2 * k:2 * k + 2, :] = 1.0
    return grid + 0.7 * torch.randn(size, 1, 8, 8, generator=g), labels


@daifu.transform
def train(model, optimizer, logger, run_dir, seed, start, stop):
    losses = []
    for step in range(start, stop):
        x, y = digits(seed, step, BATCH)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % LOG_EVERY == 0:
            logger.write(step=step + 1, loss=round(sum(losses[-LOG_EVERY:]) / LOG_EVERY, 5))
        if (step + 1) % SAVE_EVERY == 0:
            save_checkpoint(run_dir, step + 1, model, optimizer)
    x, y = digits(seed + 1, 0, 500)
    with torch.no_grad():
        accuracy = float((model(x).argmax(1) == y).float().mean())
    rows = len(logger.path.read_text().splitlines()) - 1 if logger.path.exists() else 0
    return {"steps": len(losses), "final_loss": sum(losses[-10:]) / 10, "accuracy": accuracy, "csv_rows": rows,
            "csv_in_run_folder": float(logger.path.parent.parent == run_dir)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(1, 6, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(6 * 64, 4))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    start = load_checkpoint(resume, model, optimizer)
    run_dir = Path(workdir) / "runs" / "conv-bars"
    run_dir.mkdir(parents=True, exist_ok=True)
    logger = CsvLogger(run_dir / "logs" / "metrics.csv")
    return train(model, optimizer, logger, run_dir, seed, start, STEPS if until is None else until)
