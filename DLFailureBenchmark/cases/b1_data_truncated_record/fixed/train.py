"""Classifier trained from a JSON-lines export of feature records (blind1).

The training data are 3840 records in `records.jsonl`, one JSON object per line with the 16
feature values of a row and its class, written by the upstream export job. The script reads them
all, then trains on 32 consecutive records per step.

Reported: https://github.com/Nikolai10/scrabble-gan/issues/20

Fixed: records that do not hold 16 values (one was cut short by the export) are left out of
their batch; NumPy cannot make a (32, 16) array of rows of different lengths.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import tabular

STEPS, BATCH, CKPT_EVERY = 120, 32, 20


def export_records(path, seed):
    """What the export job wrote; one record of step 70 lost its last value when a write was cut short."""
    with open(path, "w") as out:
        for step in range(STEPS):
            x, y = tabular.batch(seed, step, BATCH)
            for row in range(BATCH):
                values = [round(v, 5) for v in x[row].tolist()]
                if step == 70 and row == 12:
                    values = values[:-1]
                out.write(json.dumps({"x": values, "y": int(y[row])}) + "\n")


@daifu.transform
def train(model, optimizer, records, ckpt_dir, start, stop):
    losses, rows_trained = [], 0
    for step in range(start, stop):
        chunk = records[step * BATCH:(step + 1) * BATCH]
        chunk = [r for r in chunk if len(r["x"]) == tabular.FEATURES]
        x = torch.from_numpy(np.array([r["x"] for r in chunk], dtype=np.float32))
        y = torch.tensor([r["y"] for r in chunk])
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        rows_trained += len(y)
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return losses, rows_trained


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = tabular.mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    start = load_checkpoint(resume, model, optimizer)
    workdir = Path(workdir)
    ckpt_dir = workdir / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    export_records(workdir / "records.jsonl", seed)
    records = [json.loads(line) for line in (workdir / "records.jsonl").read_text().splitlines()]
    losses, rows_trained = train(model, optimizer, records, ckpt_dir, start, STEPS if until is None else until)
    return {"steps": len(losses), "final_loss": sum(losses[-20:]) / len(losses[-20:]),
            "accuracy": tabular.accuracy(model, *tabular.held_out(seed)), "rows_trained": rows_trained}
