"""Tabular classifier with an auxiliary anomaly head (blind1).

A five-class MLP on feature rows; class 4 is the rare "anomaly" the operators care about. After a
warm-up of 50 steps the script adds a second, binary head that scores "is this row an anomaly",
trained with `BCEWithLogitsLoss` next to the main cross-entropy, and reports how well that head
separates anomalies on held-out rows.

Reported: https://github.com/pytorch/pytorch/issues/25663

Fixed: the binary target gets the head's shape, (batch, 1): `(y == ANOMALY).float().unsqueeze(1)`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import tabular

STEPS, BATCH, CKPT_EVERY = 120, 32, 20
AUX_FROM, AUX_WEIGHT = 50, 0.5
ANOMALY = 4


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(tabular.FEATURES, 32), nn.ReLU())
        self.head = nn.Linear(32, tabular.CLASSES)
        self.anomaly = nn.Linear(32, 1)

    def forward(self, x):
        h = self.trunk(x)
        return self.head(h), self.anomaly(h)


@daifu.transform
def train(model, optimizer, ckpt_dir, start, stop, seed):
    losses, aux_steps = [], 0
    for step in range(start, stop):
        x, y = tabular.batch(seed, step, BATCH)
        logits, score = model(x)
        loss = F.cross_entropy(logits, y)
        if step >= AUX_FROM:
            is_anomaly = (y == ANOMALY).float().unsqueeze(1)
            loss = loss + AUX_WEIGHT * F.binary_cross_entropy_with_logits(score, is_anomaly)
            aux_steps += 1
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return losses, aux_steps


@torch.no_grad()
def evaluate(model, seed):
    x, y = tabular.held_out(seed)
    logits, score = model(x)
    flagged = score.squeeze(1) > 0
    return {"accuracy": float((logits.argmax(1) == y).float().mean()),
            "anomaly_accuracy": float((flagged == (y == ANOMALY)).float().mean())}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    losses, aux_steps = train(model, optimizer, ckpt_dir, start, STEPS if until is None else until, seed)
    return {"steps": len(losses), "final_loss": sum(losses[-20:]) / len(losses[-20:]), "aux_steps": aux_steps,
            **evaluate(model, seed)}
