"""Binary classifier logging its training ROC-AUC (blind1).

An MLP scores whether a row belongs to one of two of five groups. Every 20 steps the script logs
the ROC-AUC of the current batch's scores with `roc_auc`, a small NumPy implementation (rank
statistic) from the team's metrics module, to watch the ranking quality during training.

Reported: https://github.com/pytorchbearer/torchbearer/issues/424

Fixed: `roc_auc` detaches the scores before converting them to NumPy (a metric needs their
values, not their graph; `.numpy()` refuses a tensor that requires grad).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import tabular

STEPS, BATCH, CKPT_EVERY, LOG_EVERY = 120, 64, 20, 20
POSITIVE = (0, 1)


def roc_auc(scores, labels):
    """Area under the ROC curve of `scores` for binary `labels` (Mann-Whitney rank statistic)."""
    s, y = scores.detach().numpy(), labels.numpy()
    ranks = np.empty(len(s))
    ranks[s.argsort()] = np.arange(1, len(s) + 1)
    positives = y == 1
    n_pos, n_neg = int(positives.sum()), int((~positives).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    return float((ranks[positives].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def rows(seed, step, size=BATCH):
    x, group = tabular.batch(seed, step, size)
    return x, (group <= max(POSITIVE)).float()


@daifu.transform
def train(model, optimizer, ckpt_dir, start, stop, seed):
    losses, aucs = [], []
    for step in range(start, stop):
        x, y = rows(seed, step)
        logits = model(x).squeeze(1)
        loss = F.binary_cross_entropy_with_logits(logits, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % LOG_EVERY == 0:
            aucs.append(roc_auc(torch.sigmoid(logits), y))
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return losses, aucs


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(tabular.FEATURES, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    losses, aucs = train(model, optimizer, ckpt_dir, start, STEPS if until is None else until, seed)
    x, y = rows(seed + 1, 10**6, size=600)
    with torch.no_grad():
        held_out_auc = roc_auc(model(x).squeeze(1), y)
    return {"steps": len(losses), "final_loss": sum(losses[-20:]) / len(losses[-20:]), "held_out_auc": held_out_auc,
            "auc_points": len(aucs), "last_train_auc": aucs[-1] if aucs else float("nan")}
