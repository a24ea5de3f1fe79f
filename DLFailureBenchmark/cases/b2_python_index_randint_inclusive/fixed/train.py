"""Continual learning with rehearsal: task A (classes 0-4), then task B (classes 5-9).

Steps 0-59 train an MLP on task A. Steps 60-159 train on task B and, against forgetting, on one
batch of task A per step drawn at random from a rehearsal memory of 60 stored task-A batches.
Scored: accuracy on held-out samples of each task.

Fixed: the memory index is drawn with `randrange(len(memory))`; `randint(a, b)` includes `b`, so
one draw in 61 was one past the end of the memory.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

CLASSES, DIM = 10, 32
STEPS, TASK_A, BATCH, CKPT_EVERY, MEMORY = 160, 60, 48, 20, 60


def samples(g, count, classes):
    centres = torch.randn(CLASSES, DIM, generator=torch.Generator().manual_seed(71)) * 0.6
    y = torch.tensor(classes)[torch.randint(0, len(classes), (count,), generator=g)]
    return centres[y] + torch.randn(count, DIM, generator=g), y


TASK_A_CLASSES, TASK_B_CLASSES = [0, 1, 2, 3, 4], [5, 6, 7, 8, 9]


@daifu.transform
def train(model, optimizer, memory, tests, ckpt_dir, start, stop, seed):
    rehearsed = 0
    for step in range(start, stop):
        g = torch.Generator().manual_seed(seed * 100_003 + step)
        if step < TASK_A:
            x, y = samples(g, BATCH, TASK_A_CLASSES)
        else:
            x_new, y_new = samples(g, BATCH, TASK_B_CLASSES)
            x_old, y_old = memory[random.Random(seed * 1000 + step).randrange(len(memory))]
            x, y = torch.cat([x_new, x_old]), torch.cat([y_new, y_old])
            rehearsed += 1
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    with torch.no_grad():
        accuracy = [(model(x).argmax(1) == y).float().mean().item() for x, y in tests]
    return {"steps": stop - start, "task_a_accuracy": accuracy[0], "task_b_accuracy": accuracy[1],
            "rehearsal_steps": rehearsed}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(DIM, 96), nn.ReLU(), nn.Linear(96, CLASSES))
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    memory = [samples(torch.Generator().manual_seed(seed * 5000 + k), BATCH // 2, TASK_A_CLASSES) for k in range(MEMORY)]
    tests = [samples(torch.Generator().manual_seed(seed * 7 + 1), 500, TASK_A_CLASSES),
             samples(torch.Generator().manual_seed(seed * 7 + 2), 500, TASK_B_CLASSES)]
    return train(model, optimizer, memory, tests, ckpt_dir, start, STEPS if until is None else until, seed)
