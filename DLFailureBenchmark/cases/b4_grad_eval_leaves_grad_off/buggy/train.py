"""A convolutional denoising autoencoder with a validation pass every 30 steps.

`validate` turns autograd off with `torch.set_grad_enabled(False)` (instead of a `no_grad`
block) and puts the model back in train mode when it is done, but never turns autograd back
on. The forward pass after the first validation records no graph, and its `backward()` fails.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

CFG = dict(steps=90, batch=16, side=16, noise=0.5, lr=2e-3, val_every=30, ckpt_every=30)


def clean_images(gen: torch.Generator, n: int, side: int) -> torch.Tensor:
    """Smooth blobs: a sum of two Gaussian bumps per image."""
    yy, xx = torch.meshgrid(torch.arange(side).float(), torch.arange(side).float(), indexing="ij")
    out = torch.zeros(n, 1, side, side)
    for _ in range(2):
        cy, cx = torch.rand(n, 1, 1, generator=gen) * side, torch.rand(n, 1, 1, generator=gen) * side
        width = 1.5 + 2.5 * torch.rand(n, 1, 1, generator=gen)
        out[:, 0] += torch.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * width ** 2))
    return out


def noisy_batch(seed: int, step: int):
    gen = torch.Generator().manual_seed(seed * 100003 + step)
    clean = clean_images(gen, CFG["batch"], CFG["side"])
    return clean + CFG["noise"] * torch.randn(clean.shape, generator=gen), clean


class DenoisingAE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, stride=2, padding=1),
                                 nn.ReLU())
        self.dec = nn.Sequential(nn.ConvTranspose2d(16, 16, 2, stride=2), nn.ReLU(), nn.Conv2d(16, 1, 3, padding=1))

    def forward(self, x):
        return self.dec(self.enc(x))


def validate(model: nn.Module, val: tuple[torch.Tensor, torch.Tensor]) -> float:
    model.eval()
    torch.set_grad_enabled(False)
    noisy, clean = val
    mse = F.mse_loss(model(noisy), clean).item()
    model.train()
    return mse


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed):
    val_history = []
    losses = []
    for step in range(start, stop):
        if step > 0 and step % CFG["val_every"] == 0:
            val_history.append(validate(model, val))
        noisy, clean = noisy_batch(seed, step)
        loss = F.mse_loss(model(noisy), clean)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % CFG["ckpt_every"] == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    final = validate(model, val)
    torch.set_grad_enabled(True)
    return {"steps": len(losses), "val_mse": final, "validations": len(val_history) + 1,
            "noisy_mse": F.mse_loss(val[0], val[1]).item()}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = DenoisingAE()
    optimizer = torch.optim.Adam(model.parameters(), lr=CFG["lr"])
    start = load_checkpoint(resume, model, optimizer)
    gen = torch.Generator().manual_seed(seed + 31)
    clean = clean_images(gen, 64, CFG["side"])
    val = (clean + CFG["noise"] * torch.randn(clean.shape, generator=gen), clean)
    ckpt_dir = Path(workdir) / "ckpt"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, val, ckpt_dir, start, CFG["steps"] if until is None else until, seed)
