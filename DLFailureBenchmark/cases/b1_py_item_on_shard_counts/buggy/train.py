"""Classifier validated with the evaluation helper of a two-GPU setup (blind1).

A five-class MLP. Every 40 steps it is validated in batches of 100 rows with `shard_correct`, the
helper the team's data-parallel evaluation uses: it splits a batch in two shards, one per device,
and returns each shard's number of correct predictions. The script sums them into an accuracy.

Reported: https://github.com/laiguokun/bert-cloth/issues/11
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import tabular

STEPS, BATCH, CKPT_EVERY, EVAL_EVERY, EVAL_BATCH = 120, 32, 20, 40, 100
SHARDS = 2


@torch.no_grad()
def shard_correct(model, x, y, shards=SHARDS):
    """The number of correct predictions of each shard of the batch, one count per device."""
    return torch.stack([(model(a).argmax(1) == b).sum() for a, b in zip(x.chunk(shards), y.chunk(shards))])


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed):
    x_val, y_val = val
    losses, accuracies, counted = [], [], []
    for step in range(start, stop):
        x, y = tabular.batch(seed, step, BATCH)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % EVAL_EVERY == 0:
            model.eval()
            correct, seen = 0, 0
            for first in range(0, len(x_val), EVAL_BATCH):
                xb, yb = x_val[first:first + EVAL_BATCH], y_val[first:first + EVAL_BATCH]
                correct += shard_correct(model, xb, yb).item()
                seen += len(yb)
            model.train()
            accuracies.append(correct / seen)
            counted.append(correct)
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return losses, accuracies, counted


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = tabular.mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    val = tabular.held_out(seed, size=500)
    losses, accuracies, counted = train(model, optimizer, val, ckpt_dir, start, STEPS if until is None else until, seed)
    truth = tabular.accuracy(model, *val)
    return {"steps": len(losses), "final_loss": sum(losses[-20:]) / len(losses[-20:]),
            "accuracy": tabular.accuracy(model, *tabular.held_out(seed + 1)), "val_points": len(accuracies),
            "last_val_accuracy": accuracies[-1] if accuracies else float("nan"),
            "val_accuracy_error": abs(accuracies[-1] - truth) if accuracies else float("nan")}
