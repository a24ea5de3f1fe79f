"""MLP with batch normalisation, trained in epochs over a fixed table (blind1).

A five-class MLP with BatchNorm between its layers, trained for four epochs over a table of 513
rows, shuffled each epoch and cut into mini-batches of 64.

Reported: https://github.com/meetps/pytorch-semseg/issues/214
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import tabular

EPOCHS, ROWS, BATCH, CKPT_EVERY = 4, 513, 64, 8


def bn_mlp():
    return nn.Sequential(nn.Linear(tabular.FEATURES, 32), nn.BatchNorm1d(32), nn.ReLU(),
                         nn.Linear(32, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, tabular.CLASSES))


@daifu.transform
def train(model, optimizer, table, ckpt_dir, start, stop, seed):
    x_all, y_all = table
    losses, rows_trained = [], 0
    step = start
    for epoch in range(EPOCHS):
        order = torch.randperm(ROWS, generator=torch.Generator().manual_seed(seed * 1000 + epoch))
        for first in range(0, ROWS, BATCH):
            idx = order[first:first + BATCH]
            loss = F.cross_entropy(model(x_all[idx]), y_all[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            rows_trained += len(idx)
            step += 1
            if step % CKPT_EVERY == 0:
                save_checkpoint(ckpt_dir, step, model, optimizer)
            if step >= stop:
                return losses, rows_trained
    return losses, rows_trained


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = bn_mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    table = tabular.held_out(seed + 3, size=ROWS)
    losses, rows_trained = train(model, optimizer, table, ckpt_dir, start, 10**9 if until is None else until, seed)
    trained_in_train_mode = int(model.training)
    return {"steps": len(losses), "final_loss": sum(losses[-8:]) / len(losses[-8:]), "rows_trained": rows_trained,
            "train_mode_at_end": trained_in_train_mode, "accuracy": tabular.accuracy(model, *tabular.held_out(seed))}
