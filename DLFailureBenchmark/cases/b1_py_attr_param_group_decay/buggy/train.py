"""Classifier with a learning rate annealed per epoch after two warm epochs (blind1).

A five-class MLP trained for six epochs of 20 batches with SGD and momentum. The first two epochs
run at the base learning rate; from the third, the rate is annealed as in domain-adaptation
papers, `lr0 / (1 + 10 p) ** 0.75`, where p is the fraction of the annealing done.

Reported: https://github.com/easezyc/deep-transfer-learning/issues/26
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import tabular

EPOCHS, BATCHES, BATCH, CKPT_EVERY = 6, 20, 32, 20
LR, WARM_EPOCHS = 0.05, 2


@daifu.transform
def train(model, optimizer, ckpt_dir, start, stop, seed):
    losses, rates = [], []
    for epoch in range(start // BATCHES, EPOCHS):
        if epoch >= WARM_EPOCHS:
            lr = LR / math.pow(1 + 10 * (epoch - WARM_EPOCHS) / EPOCHS, 0.75)
            optimizer.param_group[0]["lr"] = lr
        rates.append(optimizer.param_groups[0]["lr"])
        for i in range(BATCHES):
            step = epoch * BATCHES + i
            if step < start:
                continue
            if step >= stop:
                return losses, rates
            x, y = tabular.batch(seed, step, BATCH)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if (step + 1) % CKPT_EVERY == 0:
                save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return losses, rates


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = tabular.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    losses, rates = train(model, optimizer, ckpt_dir, start, EPOCHS * BATCHES if until is None else until, seed)
    return {"steps": len(losses), "final_loss": sum(losses[-20:]) / len(losses[-20:]),
            "accuracy": tabular.accuracy(model, *tabular.held_out(seed)), "epochs": len(rates),
            "final_lr": rates[-1], "lr_values": len(set(rates))}
