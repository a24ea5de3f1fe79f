"""Rare-event detector validated on F1, keeping the best weights (blind1).

A binary MLP detector for a rare event (one row in ten). Every 25 steps it is validated: the
script counts true and false positives and false negatives, computes precision, recall and F1 of
the rare class, saves the weights when F1 improves, and restores the best weights at the end.

Reported: https://github.com/cheesama/DIET-pytorch/issues/11

Fixed: precision is 0 when nothing is predicted positive, and F1 is 0 when precision and
recall are both 0 (early on the detector flags no row at all).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import tabular

STEPS, BATCH, CKPT_EVERY, EVAL_EVERY = 150, 32, 25, 25
CLASSES, EVENT = 10, 0


def event_rows(seed, step, size=BATCH):
    x, kind = tabular.batch(seed, step, size, classes=CLASSES, noise=2.0)
    return x, (kind == EVENT).float()


def counts(model, x, y):
    with torch.no_grad():
        pred = (model(x).squeeze(1) > 0).float()
    tp = int(((pred == 1) & (y == 1)).sum())
    return tp, int(((pred == 1) & (y == 0)).sum()), int(((pred == 0) & (y == 1)).sum())


@daifu.transform
def train(model, optimizer, val, workdir, ckpt_dir, start, stop, seed):
    losses, scores = [], []
    best_f1, best_step = -1.0, 0
    for step in range(start, stop):
        x, y = event_rows(seed, step)
        loss = F.binary_cross_entropy_with_logits(model(x).squeeze(1), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % EVAL_EVERY == 0:
            tp, fp, fn = counts(model, *val)
            precision = tp / (tp + fp) if tp + fp else 0.0
            recall = tp / (tp + fn)
            f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
            scores.append(f1)
            if f1 > best_f1:
                best_f1, best_step = f1, step + 1
                torch.save(model.state_dict(), workdir / "best.pt")
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return losses, scores, best_step


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(tabular.FEATURES, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    start = load_checkpoint(resume, model, optimizer)
    workdir = Path(workdir)
    ckpt_dir = workdir / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    val = event_rows(seed + 1, 10**6, size=500)
    losses, scores, best_step = train(model, optimizer, val, workdir, ckpt_dir, start,
                                      STEPS if until is None else until, seed)
    if best_step:
        model.load_state_dict(torch.load(workdir / "best.pt", weights_only=True))
    tp, fp, fn = counts(model, *event_rows(seed + 2, 10**6, size=1000))
    return {"steps": len(losses), "final_loss": sum(losses[-20:]) / len(losses[-20:]), "val_points": len(scores),
            "best_step": best_step, "held_out_f1": 2 * tp / max(2 * tp + fp + fn, 1)}
