"""Numerics in a callee (fraud detector on imbalanced data): precision divides by the number of positive predictions.

Fraud is 8% of the transactions. Early in training the model predicts no fraud at all on the
validation set; the hand-written `f1_score` computes precision as `tp / (tp + fp)` with Python
integers and raises ZeroDivisionError at the first validation.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

PARAMS = {"steps": 240, "batch": 64, "lr": 1e-3, "validate_every": 20, "save_every": 60, "fraud_rate": 0.08}


def transactions(seed, count):
    g = torch.Generator().manual_seed(seed)
    fraud = (torch.rand(count, generator=g) < PARAMS["fraud_rate"]).float()
    x = torch.randn(count, 10, generator=g)
    x[:, :3] += 1.6 * fraud[:, None]
    return x, fraud


def f1_score(predicted, actual):
    tp = int(((predicted == 1) & (actual == 1)).sum())
    fp = int(((predicted == 1) & (actual == 0)).sum())
    fn = int(((predicted == 0) & (actual == 1)).sum())
    precision = tp / (tp + fp)
    recall = tp / (tp + fn)
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


@torch.no_grad()
def validate(model, x, y):
    predicted = (model(x).squeeze(1) > 0).long()
    return f1_score(predicted, y.long())


@daifu.transform
def train(model, optimizer, data, validation, ckpt_dir, seed, start, stop):
    x, y = data
    g = torch.Generator().manual_seed(seed)
    pos_weight = torch.tensor(3.0)
    scores, losses = [], []
    for step in range(start, stop):
        rows = torch.randint(0, len(y), (PARAMS["batch"],), generator=g)
        logit = model(x[rows]).squeeze(1)
        loss = nn.functional.binary_cross_entropy_with_logits(logit, y[rows], pos_weight=pos_weight)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % PARAMS["validate_every"] == 0:
            scores.append(validate(model, *validation))
        if (step + 1) % PARAMS["save_every"] == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return {"steps": len(losses), "final_loss": sum(losses[-20:]) / 20, "f1": validate(model, *validation),
            "validations": len(scores)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 1))
    with torch.no_grad():
        model[2].bias.fill_(-2.0)  # start from the base rate: most transactions are fine
    optimizer = torch.optim.Adam(model.parameters(), lr=PARAMS["lr"])
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, transactions(seed, 6000), transactions(seed + 1, 1500), ckpt_dir, seed, start,
                 PARAMS["steps"] if until is None else until)
