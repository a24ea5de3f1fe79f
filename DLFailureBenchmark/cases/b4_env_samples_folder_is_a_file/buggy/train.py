"""Super-resolution CNN (SRCNN-style) that writes preview outputs every 30 steps.

Previews go to `outputs/samples/step_XXXX.npy`; the folder is made on first use. But
`outputs/samples` already exists as a *file*: an older version of this script dumped all its
previews into one array file named `samples`. `mkdir(exist_ok=True)` refuses a path that is a
file, and the first preview, at step 30, stops the run.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

SR = {"scale": 2, "hr": 16, "batch": 16, "steps": 120, "lr": 1e-3, "preview_every": 30, "ckpt_every": 30}


def textures(gen: torch.Generator, n: int) -> torch.Tensor:
    """High-resolution patches: sums of random oriented sinusoids."""
    yy, xx = torch.meshgrid(torch.arange(SR["hr"]).float(), torch.arange(SR["hr"]).float(), indexing="ij")
    out = torch.zeros(n, 1, SR["hr"], SR["hr"])
    for _ in range(3):
        fy, fx = torch.rand(n, 1, 1, generator=gen) * 0.8, torch.rand(n, 1, 1, generator=gen) * 0.8
        phase = torch.rand(n, 1, 1, generator=gen) * 6.28
        out[:, 0] += torch.sin(fy * yy + fx * xx + phase) / 3
    return out


def degrade(hr: torch.Tensor) -> torch.Tensor:
    low = F.avg_pool2d(hr, SR["scale"])
    return F.interpolate(low, scale_factor=SR["scale"], mode="bilinear", align_corners=False)


class SRCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.Conv2d(32, 16, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(16, 1, 3, padding=1))

    def forward(self, x):
        return x + self.body(x)


def save_samples(folder: Path, step: int, images: torch.Tensor) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / f"step_{step:04d}.npy", images.numpy())


@torch.no_grad()
def psnr(model: nn.Module, hr: torch.Tensor) -> float:
    mse = F.mse_loss(model(degrade(hr)), hr).item()
    return float(10 * np.log10(4.0 / mse))  # signal range about [-2, 2]


@daifu.transform
def train(model, optimizer, val_hr, samples_dir, ckpt_dir, start, stop, seed):
    gen = torch.Generator().manual_seed(seed)
    losses = []
    for step in range(start, stop):
        hr = textures(gen, SR["batch"])
        loss = F.mse_loss(model(degrade(hr)), hr)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % SR["preview_every"] == 0:
            with torch.no_grad():
                preview = model(degrade(val_hr[:4]))
            save_samples(samples_dir, step + 1, preview)
        if (step + 1) % SR["ckpt_every"] == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return {"steps": len(losses), "val_psnr": psnr(model, val_hr)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    out = Path(workdir) / "outputs"
    out.mkdir(parents=True, exist_ok=True)
    old = out / "samples"
    if not old.exists():  # what the previous version of the script left behind
        with old.open("wb") as f:
            np.save(f, np.arange(64, dtype=np.float32).reshape(4, 16))
    old_digest = hashlib.sha256(old.read_bytes()).hexdigest()
    model = SRCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=SR["lr"])
    start = load_checkpoint(resume, model, optimizer)
    (out / "ckpt").mkdir(exist_ok=True)
    val_hr = textures(torch.Generator().manual_seed(seed + 9), 64)
    result = train(model, optimizer, val_hr, out / "samples", out / "ckpt", start,
                   SR["steps"] if until is None else until, seed)
    files = [p for p in out.rglob("*") if p.is_file()]
    result["previews_written"] = sum(p.name.startswith("step_") and p.suffix == ".npy" for p in files)
    result["old_samples_kept"] = int(any(hashlib.sha256(p.read_bytes()).hexdigest() == old_digest for p in files))
    return result
