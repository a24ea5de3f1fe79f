"""A PyTorch training loop that crashes in epoch 2 with a shape bug, and is fixed in place.

From epoch 2 on, the loop mixes each batch with a shuffled copy of itself (mixup), and the new
line feeds the model a 3-D view of the batch: `Linear` fails with "mat1 and mat2 shapes cannot
be multiplied". A policy answers the crash with a surgery (the corrected function); DaiFu resumes
at the faulty statement, in the same batch, with the same model, optimizer and step counter.

Run it: `python examples/shape_bug_surgery.py`.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

import daifu


def make_data(batches: int = 12, batch_size: int = 64, features: int = 16, seed: int = 0) -> list[tuple]:
    """A small, learnable classification set generated in code: the class is set by a linear rule."""
    generator = torch.Generator().manual_seed(seed)
    weights = torch.randn(features, 3, generator=generator)
    data = []
    for _ in range(batches):
        x = torch.randn(batch_size, features, generator=generator)
        data.append((x, (x @ weights).argmax(dim=1)))
    return data


@daifu.transform
def train(model: nn.Module, optimizer: torch.optim.Optimizer, data: list, epochs: int, history: list) -> int:
    step = 0
    for epoch in range(epochs):
        for xb, yb in data:
            if epoch >= 2:  # mixup from epoch 2 on
                mixed = 0.9 * xb + 0.1 * xb[torch.randperm(xb.shape[0])]
                logits = model(mixed.view(mixed.shape[0], 4, -1))
            else:
                logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            history.append((epoch, step, loss.item()))
    return step


def fix_the_view(crash: daifu.Crash) -> daifu.Surgery | None:
    """The policy: the fix a person would type into the surgery file."""
    print(f"crash at {crash.filename}:{crash.lineno} in epoch {crash.locals['epoch']}, step {crash.locals['step']}:")
    print(f"    {crash.statement}\n    {type(crash.exception).__name__}: {crash.exception}")
    return daifu.Surgery(crash.source.replace("model(mixed.view(mixed.shape[0], 4, -1))", "model(mixed)"))


def main(epochs: int = 5) -> dict[str, Any]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    data, history = make_data(), []
    daifu.set_policy(fix_the_view)
    started = time.perf_counter()
    try:
        steps = train(model, optimizer, data, epochs, history)
    finally:
        daifu.set_policy(None)
    first, last = history[0][2], history[-1][2]
    print(f"finished {steps} steps in {time.perf_counter() - started:.2f}s; loss {first:.3f} -> {last:.3f}")
    return {"steps": steps, "history": history, "model": model, "optimizer": optimizer}


if __name__ == "__main__":
    main()
