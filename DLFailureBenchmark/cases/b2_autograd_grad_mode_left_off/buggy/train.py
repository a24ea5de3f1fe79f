"""Spoken-digit features classifier with a validation check every 25 steps.

Ten digits, 40-dimensional acoustic feature vectors, an MLP with dropout trained with Adam (lr
1e-3) for 150 steps. `evaluate` switches the model to eval mode and turns gradient tracking off to
save memory while it scores 600 validation samples; the script keeps the accuracy history.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

DIGITS, DIM = 10, 40
STEPS, BATCH, EVAL_EVERY, CKPT_EVERY = 150, 32, 25, 25


def utterances(g, count):
    centres = torch.randn(DIGITS, DIM, generator=torch.Generator().manual_seed(141)) * 0.45
    y = torch.randint(0, DIGITS, (count,), generator=g)
    return centres[y] + torch.randn(count, DIM, generator=g), y


def evaluate(model, val):
    torch.set_grad_enabled(False)
    model.eval()
    accuracy = (model(val[0]).argmax(1) == val[1]).float().mean().item()
    model.train()
    return accuracy


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed):
    history = []
    for step in range(start, stop):
        x, y = utterances(torch.Generator().manual_seed(seed * 100_003 + step), BATCH)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (step + 1) % EVAL_EVERY == 0:
            history.append(evaluate(model, val))
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return {"steps": stop - start, "accuracy": history[-1] if history else 0.0, "evals": len(history)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(DIM, 128), nn.ReLU(), nn.Dropout(0.2), nn.Linear(128, DIGITS))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    val = utterances(torch.Generator().manual_seed(seed * 7 + 2), 600)
    return train(model, optimizer, val, ckpt_dir, start, STEPS if until is None else until, seed)
