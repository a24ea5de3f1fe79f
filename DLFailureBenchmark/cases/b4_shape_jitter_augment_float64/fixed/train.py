"""Temporal-convolution forecaster for sensor series, with jitter augmentation from the second epoch.

The jitter noise is drawn with NumPy (`rng.normal`, float64) and added to the float32 batch:
the sum is promoted to float64, and the first convolution, whose weights are float32, refuses
the double-precision input at the first augmented step (step 25).

Fixed: the noise is made a float32 tensor before it is added.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

WINDOW, HORIZON = 48, 8
PLAN = {"epochs": 4, "steps_per_epoch": 25, "batch": 32, "lr": 3e-3, "jitter_from_epoch": 1, "jitter_sigma": 0.05}


def series(seed: int, length: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    t = torch.arange(length).float()
    base = torch.sin(2 * torch.pi * t / 24) + 0.5 * torch.sin(2 * torch.pi * t / 7.5)
    return base + 0.1 * torch.randn(length, generator=gen)


def windows(data: torch.Tensor, starts: torch.Tensor):
    x = torch.stack([data[s:s + WINDOW] for s in starts.tolist()]).unsqueeze(1)
    y = torch.stack([data[s + WINDOW:s + WINDOW + HORIZON] for s in starts.tolist()])
    return x, y


class TCNForecaster(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv1d(1, 16, 3, dilation=1, padding=2),
                                    nn.Conv1d(16, 16, 3, dilation=2, padding=4),
                                    nn.Conv1d(16, 16, 3, dilation=4, padding=8)])
        self.head = nn.Linear(16, HORIZON)

    def forward(self, x):
        h = x
        for conv in self.convs:
            h = F.relu(conv(h)[..., :h.size(-1)])  # causal: drop the look-ahead positions
        return self.head(h[..., -1])


@daifu.transform
def train(model, optimizer, data, test, ckpt_dir, start, stop, seed):
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    losses, jittered = [], 0
    for step in range(start, stop):
        epoch = step // PLAN["steps_per_epoch"]
        starts = torch.randint(0, len(data) - WINDOW - HORIZON, (PLAN["batch"],), generator=gen)
        xb, yb = windows(data, starts)
        if epoch >= PLAN["jitter_from_epoch"]:
            xb = xb + torch.from_numpy(rng.normal(0.0, PLAN["jitter_sigma"], size=xb.shape)).float()
            jittered += 1
        loss = F.mse_loss(model(xb), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % PLAN["steps_per_epoch"] == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    with torch.no_grad():
        x_test, y_test = test
        rmse = torch.sqrt(F.mse_loss(model(x_test), y_test)).item()
    float32 = all(p.dtype == torch.float32 for p in model.parameters())
    return {"steps": len(losses), "jittered_steps": jittered, "test_rmse": rmse, "float32_params": int(float32)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    data = series(seed, 2000)
    test_data = series(seed + 1, 600)
    test = windows(test_data, torch.arange(0, 600 - WINDOW - HORIZON, 7))
    model = TCNForecaster()
    optimizer = torch.optim.Adam(model.parameters(), lr=PLAN["lr"])
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "ckpt"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    total = PLAN["epochs"] * PLAN["steps_per_epoch"]
    return train(model, optimizer, data, test, ckpt_dir, start, total if until is None else until, seed)
