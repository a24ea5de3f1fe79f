"""API misuse (MNIST-style CNN): a checkpoint holding a NumPy value, read with the new `torch.load` default.

Every 40 steps the script keeps its best model in `best.pt`, with the accuracy NumPy computed; at
step 80 it drops the learning rate and goes back to the best model. Since PyTorch 2.6 `torch.load`
reads with `weights_only=True` and refuses the NumPy scalar.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import cnn
import numpy as np

STEPS, BATCH, EVAL_EVERY, CKPT_EVERY = 120, 32, 40, 25
DROP_AT = 80


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed):
    x_val, y_val = val
    losses = []
    best_accuracy = 0.0
    for step in range(start, stop):
        x, y = cnn.batch(seed, step, BATCH)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % EVAL_EVERY == 0:
            with torch.no_grad():
                accuracy = np.mean((model(x_val).argmax(1) == y_val).numpy())
            if accuracy >= best_accuracy:
                best_accuracy = accuracy
                torch.save({"model": model.state_dict(), "accuracy": accuracy}, ckpt_dir / "best.pt")
        if step + 1 == DROP_AT:
            best = torch.load(ckpt_dir / "best.pt")
            model.load_state_dict(best["model"])
            for group in optimizer.param_groups:
                group["lr"] *= 0.3
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return cnn.metrics(model, val, losses, len(losses))


def main(workdir, seed=0, resume=None, until=None):
    model, optimizer = cnn.build(seed)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, cnn.validation(seed), ckpt_dir, start, STEPS if until is None else until, seed)
