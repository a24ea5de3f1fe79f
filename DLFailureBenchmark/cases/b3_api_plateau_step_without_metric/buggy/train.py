"""API misuse (regression MLP): the scheduler was switched to ReduceLROnPlateau, whose `step` needs the metric.

The config's scheduler was changed from StepLR to ReduceLROnPlateau; the end-of-epoch call is
still `scheduler.step()`, and ReduceLROnPlateau.step() requires the monitored value: TypeError
at the end of the first epoch.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

CONFIG = {"epochs": 8, "batches": 15, "batch_size": 40, "lr": 0.05, "scheduler": "plateau", "save_every": 30}


def make_scheduler(optimizer):
    if CONFIG["scheduler"] == "plateau":
        return torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0)
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)


def curve(seed, count):
    g = torch.Generator().manual_seed(seed)
    x = 4 * torch.rand(count, 1, generator=g) - 2
    return x, torch.sin(2 * x) + 0.3 * x ** 2 + 0.1 * torch.randn(count, 1, generator=g)


@torch.no_grad()
def validation_loss(model, x, y):
    return float(nn.functional.mse_loss(model(x), y))


@daifu.transform
def train(model, optimizer, scheduler, data, val, ckpt_dir, seed, start, stop):
    x, y = data
    g = torch.Generator().manual_seed(seed)
    losses, rates = [], []
    step = 0
    for epoch in range(CONFIG["epochs"]):
        for _ in range(CONFIG["batches"]):
            rows = torch.randint(0, len(y), (CONFIG["batch_size"],), generator=g)
            if step >= stop:
                break
            if step < start:
                step += 1
                continue
            loss = nn.functional.mse_loss(model(x[rows]), y[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            step += 1
            if step % CONFIG["save_every"] == 0:
                save_checkpoint(ckpt_dir, step, model, optimizer)
        val_loss = validation_loss(model, *val)
        scheduler.step()
        rates.append(optimizer.param_groups[0]["lr"])
    return {"steps": len(losses), "final_loss": sum(losses[-10:]) / 10, "val_mse": validation_loss(model, *val),
            "final_lr": rates[-1] if rates else CONFIG["lr"], "lr_reductions": sum(b < a for a, b in zip(rates, rates[1:]))
            + int(bool(rates) and rates[0] < CONFIG["lr"])}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=CONFIG["lr"], momentum=0.9)
    start = load_checkpoint(resume, model, optimizer)
    scheduler = make_scheduler(optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    total = CONFIG["epochs"] * CONFIG["batches"]
    return train(model, optimizer, scheduler, curve(seed, 1200), curve(seed + 1, 300), ckpt_dir, seed, start,
                 total if until is None else until)
