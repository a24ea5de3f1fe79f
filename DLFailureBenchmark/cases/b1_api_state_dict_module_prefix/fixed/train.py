"""Small classifier distilled from a larger teacher in its second stage (blind1).

A small MLP (8 hidden units) is trained on labels for 60 steps; then it loads the teacher, a
larger MLP trained earlier on the two-GPU machine with `nn.DataParallel` and saved to
`teacher.pt`, and trains on a mix of the labels and the teacher's softened predictions.

Reported: https://github.com/pytorch/pytorch/issues/3805

Fixed: the teacher's weights were saved from the DataParallel wrapper, so every key starts with
"module."; the prefix is removed before loading them into the bare model.
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
DISTILL_FROM, T, ALPHA = 60, 3.0, 0.7
NOISE = 3.0


def train_teacher(path, seed, steps=150):
    """The teacher as it was trained (wrapped in DataParallel, as on the two-GPU machine) and saved."""
    torch.manual_seed(seed + 1)
    teacher = nn.DataParallel(tabular.mlp(hidden=64))
    optimizer = torch.optim.Adam(teacher.parameters(), lr=3e-3)
    for step in range(steps):
        x, y = tabular.batch(seed + 1, step, 64, noise=NOISE)
        loss = F.cross_entropy(teacher(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    torch.save(teacher.state_dict(), path)


@daifu.transform
def train(model, optimizer, teacher_path, ckpt_dir, start, stop, seed):
    losses, teacher = [], None
    for step in range(start, stop):
        x, y = tabular.batch(seed, step, BATCH, noise=NOISE)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        if step == DISTILL_FROM:
            teacher = tabular.mlp(hidden=64)
            state = torch.load(teacher_path, weights_only=True)
            teacher.load_state_dict({k.removeprefix("module."): v for k, v in state.items()})
            teacher.eval()
        if step >= DISTILL_FROM:
            with torch.no_grad():
                soft = F.softmax(teacher(x) / T, dim=1)
            distill = F.kl_div(F.log_softmax(logits / T, dim=1), soft, reduction="batchmean") * T * T
            loss = (1 - ALPHA) * loss + ALPHA * distill
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return losses, teacher


def main(workdir, seed=0, resume=None, until=None):
    workdir = Path(workdir)
    train_teacher(workdir / "teacher.pt", seed)
    torch.manual_seed(seed)
    model = tabular.mlp(hidden=8)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = workdir / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    losses, teacher = train(model, optimizer, workdir / "teacher.pt", ckpt_dir, start,
                            STEPS if until is None else until, seed)
    held_out = tabular.held_out(seed, noise=NOISE)
    return {"steps": len(losses), "final_loss": sum(losses[-20:]) / len(losses[-20:]),
            "accuracy": tabular.accuracy(model, *held_out),
            "teacher_accuracy": tabular.accuracy(teacher, *held_out) if teacher is not None else float("nan")}
