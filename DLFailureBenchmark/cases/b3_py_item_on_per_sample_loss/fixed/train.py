"""Python error on a live object (weighted regression): `.item()` on the per-sample loss vector.

Recent sales count more: the criterion is built with `reduction="none"` and the script weights
each row's loss before averaging. The running-loss meter is still fed `losses.item()`, the
unreduced vector, which `.item()` refuses — right after the first optimizer step.

Fixed: the meter is given the batch's mean loss, `losses.mean().item()`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

SETTINGS = {"rows": 1500, "batch": 50, "epochs": 4, "lr": 5e-3, "save_every": 30}


class AverageMeter:
    def __init__(self):
        self.total, self.count = 0.0, 0

    def update(self, value, n=1):
        self.total += value * n
        self.count += n

    @property
    def average(self):
        return self.total / max(self.count, 1)


def sales(seed, rows):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 6)).astype(np.float32)
    age = rng.random(rows).astype(np.float32)  # 0 = sold today, 1 = five years ago
    price = x @ np.array([1.5, -0.8, 0.6, 0.0, 0.3, -1.1], dtype=np.float32) + 0.8 * (1 - age) * x[:, 0]
    price += 0.2 * rng.normal(size=rows).astype(np.float32)
    features = np.concatenate([x, age[:, None]], 1)
    return torch.from_numpy(features), torch.from_numpy(price.astype(np.float32)), torch.from_numpy(1.5 - age)


@daifu.transform
def train(model, optimizer, data, test, ckpt_dir, seed, start, stop):
    criterion = nn.MSELoss(reduction="none")
    features, price, weight = data
    per_epoch = len(price) // SETTINGS["batch"]
    meter = AverageMeter()
    steps = 0
    for step in range(start, stop):
        epoch, i = divmod(step, per_epoch)
        order = torch.randperm(len(price), generator=torch.Generator().manual_seed(seed + epoch))
        rows = order[i * SETTINGS["batch"]:(i + 1) * SETTINGS["batch"]]
        losses = criterion(model(features[rows]).squeeze(1), price[rows])
        loss = (losses * weight[rows]).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        meter.update(losses.mean().item(), len(rows))
        steps += 1
        if (step + 1) % SETTINGS["save_every"] == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    with torch.no_grad():
        test_mse = float(((model(test[0]).squeeze(1) - test[1]) ** 2).mean())
    return {"steps": steps, "final_loss": meter.average, "test_mse": test_mse, "meter_rows": meter.count}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    data = sales(seed, SETTINGS["rows"])
    test = sales(seed + 1, 500)[:2]
    model = nn.Sequential(nn.Linear(7, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=SETTINGS["lr"])
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    total = SETTINGS["epochs"] * (SETTINGS["rows"] // SETTINGS["batch"])
    return train(model, optimizer, data, test, ckpt_dir, seed, start, total if until is None else until)
