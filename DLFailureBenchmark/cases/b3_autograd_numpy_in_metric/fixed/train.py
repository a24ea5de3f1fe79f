"""Autograd misuse in a callee (protein-stability regression): a NumPy metric on a tensor that requires grad.

Every 25 steps the script logs the Pearson correlation of the batch's predictions with the
targets; `pearson` computes it with `np.corrcoef` on `prediction.numpy()`. The predictions
come straight from the training forward pass and still require grad, so `.numpy()` refuses.

Fixed: `pearson` detaches its inputs before converting them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

HP = {"steps": 150, "batch": 48, "lr": 2e-3, "log_every": 25, "save_every": 50, "length": 12}
AMINO = 20


def mutants(seed, count):
    """One-hot sequences of length 12; stability is a sum of per-position, per-residue effects."""
    g = torch.Generator().manual_seed(seed)
    effect = torch.randn(HP["length"], AMINO, generator=torch.Generator().manual_seed(5))
    residues = torch.randint(0, AMINO, (count, HP["length"]), generator=g)
    stability = effect.gather(1, residues.T).T.sum(1) + 0.3 * torch.randn(count, generator=g)
    return nn.functional.one_hot(residues, AMINO).float().flatten(1), stability


def pearson(prediction, target):
    return float(np.corrcoef(prediction.detach().numpy(), target.detach().numpy())[0, 1])


@daifu.transform
def train(model, optimizer, data, test, ckpt_dir, seed, start, stop):
    x, y = data
    g = torch.Generator().manual_seed(seed)
    log = []
    losses = []
    for step in range(start, stop):
        rows = torch.randint(0, len(y), (HP["batch"],), generator=g)
        prediction = model(x[rows]).squeeze(1)
        loss = nn.functional.mse_loss(prediction, y[rows])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % HP["log_every"] == 0:
            log.append({"step": step + 1, "loss": loss.item(), "pearson": pearson(prediction, y[rows])})
        if (step + 1) % HP["save_every"] == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    with torch.no_grad():
        test_r = pearson(model(test[0]).squeeze(1), test[1])
    return {"steps": len(losses), "final_loss": sum(losses[-10:]) / 10, "test_pearson": test_r,
            "pearson_logged": len(log)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(HP["length"] * AMINO, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=HP["lr"])
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, mutants(seed, 3000), mutants(seed + 1, 600), ckpt_dir, seed, start,
                 HP["steps"] if until is None else until)
