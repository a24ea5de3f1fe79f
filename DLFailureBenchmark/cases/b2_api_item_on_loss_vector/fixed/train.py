"""Product-category classifier with a validation report every 40 steps.

Items are 40-dimensional feature vectors of eight categories. A two-layer MLP trains with Adam on
batches of 64; every 40 steps `validate` scores 500 validation items, and the script records the
validation loss and the five items the model finds hardest (for the error analysis done later).

Fixed: `validate` returns one loss per item (`reduction="none"`, which the hardest-items report
needs); the recorded validation loss is their mean.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

CATEGORIES, DIM = 8, 40
STEPS, BATCH, EVAL_EVERY, CKPT_EVERY = 120, 64, 40, 30


def items(g, count):
    centres = torch.randn(CATEGORIES, DIM, generator=torch.Generator().manual_seed(21)) * 0.6
    y = torch.randint(0, CATEGORIES, (count,), generator=g)
    return centres[y] + torch.randn(count, DIM, generator=g), y


def validate(model, val):
    """Per-item validation losses, and the indices of the five hardest items."""
    model.eval()
    with torch.no_grad():
        losses = F.cross_entropy(model(val[0]), val[1], reduction="none")
    model.train()
    return losses, losses.topk(5).indices.tolist()


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed):
    history = {"val_loss": [], "hardest": []}
    for step in range(start, stop):
        x, y = items(torch.Generator().manual_seed(seed * 100_003 + step), BATCH)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (step + 1) % EVAL_EVERY == 0:
            val_losses, hardest = validate(model, val)
            history["val_loss"].append(val_losses.mean().item())
            history["hardest"].append(hardest)
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    with torch.no_grad():
        accuracy = (model(val[0]).argmax(1) == val[1]).float().mean().item()
    return {"steps": stop - start, "accuracy": accuracy, "val_evals": len(history["val_loss"]),
            "val_loss_last": history["val_loss"][-1] if history["val_loss"] else float("nan"),
            "hardest_reports": len(history["hardest"])}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(DIM, 64), nn.ReLU(), nn.Linear(64, CATEGORIES))
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    val = items(torch.Generator().manual_seed(seed * 7 + 3), 500)
    return train(model, optimizer, val, ckpt_dir, start, STEPS if until is None else until, seed)
