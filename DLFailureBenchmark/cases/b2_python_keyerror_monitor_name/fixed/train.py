"""Classifier with best-checkpoint tracking on a monitored validation metric.

Ten classes of 32-dimensional samples, an MLP with dropout, Adam with a step decay. Every 40 steps
`evaluate` returns the validation metrics; the script keeps `best.pt`, the weights of the best
evaluation so far according to the monitored metric (higher is better), and the final model is the
best checkpoint.

Fixed: the monitored metric is named as `evaluate` names it (`accuracy`); `val_acc` is not a key of
the metrics it returns.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

CLASSES, DIM = 10, 32
STEPS, BATCH, EVAL_EVERY, CKPT_EVERY = 200, 64, 40, 25
MONITOR = "accuracy"


def samples(g, count):
    centres = torch.randn(CLASSES, DIM, generator=torch.Generator().manual_seed(61)) * 0.5
    y = torch.randint(0, CLASSES, (count,), generator=g)
    return centres[y] + torch.randn(count, DIM, generator=g), y


def evaluate(model, val):
    model.eval()
    with torch.no_grad():
        logits = model(val[0])
    model.train()
    return {"loss": F.cross_entropy(logits, val[1]).item(),
            "accuracy": (logits.argmax(1) == val[1]).float().mean().item()}


@daifu.transform
def train(model, optimizer, scheduler, val, best_path, ckpt_dir, start, stop, seed):
    best, evals = float("-inf"), 0
    for step in range(start, stop):
        x, y = samples(torch.Generator().manual_seed(seed * 100_003 + step), BATCH)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        if (step + 1) % EVAL_EVERY == 0:
            metrics = evaluate(model, val)
            evals += 1
            if metrics[MONITOR] > best:
                best = metrics[MONITOR]
                torch.save(model.state_dict(), best_path)
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return {"steps": stop - start, "evals": evals}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(DIM, 128), nn.ReLU(), nn.Dropout(0.3), nn.Linear(128, CLASSES))
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=80, gamma=0.5)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    best_path = Path(workdir) / "best.pt"
    val = samples(torch.Generator().manual_seed(seed * 7 + 2), 800)
    test = samples(torch.Generator().manual_seed(seed * 7 + 3), 800)
    result = train(model, optimizer, scheduler, val, best_path, ckpt_dir, start, STEPS if until is None else until, seed)
    result["best_saved"] = int(best_path.exists())
    if best_path.exists():
        best_model = copy.deepcopy(model)
        best_model.load_state_dict(torch.load(best_path, weights_only=True))
        result["best_accuracy"] = evaluate(best_model, test)["accuracy"]
    else:
        result["best_accuracy"] = 0.0
    return result
