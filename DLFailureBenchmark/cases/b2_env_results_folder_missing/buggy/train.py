"""Classifier that writes its validation predictions at every evaluation, for later error analysis.

Six classes of 20-dimensional samples, an MLP trained with Adam for 160 steps. Every 40 steps the
script writes the predicted class and confidence of each of the 600 validation samples to
`results/<run>/predictions/step_<k>.txt`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

CLASSES, DIM = 6, 20
STEPS, BATCH, EVAL_EVERY, CKPT_EVERY = 160, 64, 40, 25
RUN = "mlp-lr2e-3-bs64"


def samples(g, count):
    centres = torch.randn(CLASSES, DIM, generator=torch.Generator().manual_seed(111)) * 0.6
    y = torch.randint(0, CLASSES, (count,), generator=g)
    return centres[y] + torch.randn(count, DIM, generator=g), y


@daifu.transform
def train(model, optimizer, val, results, ckpt_dir, start, stop, seed):
    prediction_dir = results / RUN / "predictions"
    for step in range(start, stop):
        x, y = samples(torch.Generator().manual_seed(seed * 100_003 + step), BATCH)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (step + 1) % EVAL_EVERY == 0:
            with torch.no_grad():
                probs = F.softmax(model(val[0]), dim=1)
            confidence, predicted = probs.max(1)
            table = np.stack([predicted.numpy(), confidence.numpy(), val[1].numpy()], axis=1)
            np.savetxt(prediction_dir / f"step_{step + 1}.txt", table, fmt=["%d", "%.4f", "%d"])
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    with torch.no_grad():
        accuracy = (model(val[0]).argmax(1) == val[1]).float().mean().item()
    files = sorted(prediction_dir.glob("step_*.txt")) if prediction_dir.exists() else []
    rows = sum(len(np.loadtxt(f)) for f in files)
    return {"steps": stop - start, "accuracy": accuracy, "prediction_files": len(files), "prediction_rows": rows}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(DIM, 64), nn.ReLU(), nn.Linear(64, CLASSES))
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    results = Path(workdir) / "results"
    results.mkdir(exist_ok=True)
    val = samples(torch.Generator().manual_seed(seed * 7 + 2), 600)
    return train(model, optimizer, val, results, ckpt_dir, start, STEPS if until is None else until, seed)
