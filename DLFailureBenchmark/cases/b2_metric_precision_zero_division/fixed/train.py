"""Fraud detector on transaction features: a rare positive class, tracked by precision, recall, F1.

About 8% of the transactions (24 features) are fraudulent. A small MLP trains with BCE on batches
of 128 drawn from a stream; every 30 steps the script thresholds the predicted probability at
0.5 on 2000 validation transactions and records precision, recall and F1 of the fraud class.

Fixed: precision and F1 are 0 when their denominators are 0 (scikit-learn's `zero_division=0`):
early in training the model flags no transaction at all, so `tp + fp` is 0, and then so is
`precision + recall`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

FEATURES, FRAUD_RATE = 24, 0.08
STEPS, BATCH, EVAL_EVERY, CKPT_EVERY = 150, 128, 30, 25


def transactions(g, count):
    y = (torch.rand(count, generator=g) < FRAUD_RATE).long()
    direction = torch.randn(FEATURES, generator=torch.Generator().manual_seed(4))
    x = torch.randn(count, FEATURES, generator=g) + 0.45 * y[:, None] * direction
    return x, y


def counts(model, val):
    """True positives, false positives and false negatives of the fraud class at threshold 0.5."""
    with torch.no_grad():
        flagged = torch.sigmoid(model(val[0]).squeeze(1)) > 0.5
    fraud = val[1] == 1
    return int((flagged & fraud).sum()), int((flagged & ~fraud).sum()), int((~flagged & fraud).sum())


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed):
    history = []
    for step in range(start, stop):
        x, y = transactions(torch.Generator().manual_seed(seed * 100_003 + step), BATCH)
        loss = F.binary_cross_entropy_with_logits(model(x).squeeze(1), y.float())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (step + 1) % EVAL_EVERY == 0:
            tp, fp, fn = counts(model, val)
            precision = tp / (tp + fp) if tp + fp else 0.0
            recall = tp / (tp + fn) if tp + fn else 0.0
            f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
            history.append({"step": step, "precision": precision, "recall": recall, "f1": f1})
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    last = history[-1] if history else {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    return {"steps": stop - start, "evals": len(history),
            "second_precision": history[1]["precision"] if len(history) > 1 else -1.0,
            "second_f1": history[1]["f1"] if len(history) > 1 else -1.0,
            "precision": last["precision"], "recall": last["recall"], "f1": last["f1"]}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    val = transactions(torch.Generator().manual_seed(seed * 7 + 3), 2000)
    return train(model, optimizer, val, ckpt_dir, start, STEPS if until is None else until, seed)
