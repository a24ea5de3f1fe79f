"""Classifier validated every 40 steps, in batches, on 500 rows (blind1).

A five-class MLP. Every 40 steps the script validates it on 500 held-out rows, 64 at a time, and
logs the accuracy and the number of rows it was computed on.

Reported: https://github.com/kang205/SASRec/issues/6

Fixed: the number of validation batches is an integer, rounded up so that the last, partial
batch is validated too: `math.ceil(len(x_val) / EVAL_BATCH)` (`/` gives a float, which `range`
refuses).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import tabular

STEPS, BATCH, CKPT_EVERY, EVAL_EVERY, EVAL_BATCH = 120, 32, 20, 40, 64


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed):
    x_val, y_val = val
    losses, accuracies, rows_validated = [], [], []
    for step in range(start, stop):
        x, y = tabular.batch(seed, step, BATCH)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % EVAL_EVERY == 0:
            n_batches = math.ceil(len(x_val) / EVAL_BATCH)
            correct, seen = 0, 0
            with torch.no_grad():
                for i in range(n_batches):
                    xb, yb = x_val[i * EVAL_BATCH:(i + 1) * EVAL_BATCH], y_val[i * EVAL_BATCH:(i + 1) * EVAL_BATCH]
                    correct += int((model(xb).argmax(1) == yb).sum())
                    seen += len(yb)
            accuracies.append(correct / seen)
            rows_validated.append(seen)
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return losses, accuracies, rows_validated


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = tabular.mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    val = tabular.held_out(seed + 1, size=500)
    losses, accuracies, rows = train(model, optimizer, val, ckpt_dir, start, STEPS if until is None else until, seed)
    return {"steps": len(losses), "final_loss": sum(losses[-20:]) / len(losses[-20:]),
            "accuracy": tabular.accuracy(model, *tabular.held_out(seed)), "validations": len(accuracies),
            "fewest_rows_validated": min(rows, default=0), "most_rows_validated": max(rows, default=0),
            "val_accuracy_error": abs(accuracies[-1] - tabular.accuracy(model, *val)) if accuracies else float("nan")}
