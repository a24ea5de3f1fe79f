"""A VAE on small binary glyph images, with the posterior written as a torch.distributions.Normal.

The encoder's scale head is a plain Linear layer: its outputs are used as standard deviations
as they come, negative ones included, and `Normal` rejects them (argument validation is on by
default) at the first batch.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.distributions import Normal, kl_divergence
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

SETTINGS = {"steps": 200, "batch": 32, "latent": 6, "lr": 3e-3, "ckpt_every": 50, "side": 8, "warmup": 100}


def glyphs(gen: torch.Generator, n: int, side: int) -> torch.Tensor:
    """Binary images of one horizontal and one vertical bar at random places."""
    images = torch.zeros(n, side, side)
    rows = torch.randint(0, side, (n,), generator=gen)
    cols = torch.randint(0, side, (n,), generator=gen)
    images[torch.arange(n), rows, :] = 1.0
    images[torch.arange(n), :, cols] = 1.0
    return images.view(n, -1)


class VAE(nn.Module):
    def __init__(self, pixels: int, latent: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(pixels, 64), nn.ReLU())
        self.loc = nn.Linear(64, latent)
        self.scale = nn.Linear(64, latent)
        self.decoder = nn.Sequential(nn.Linear(latent, 64), nn.ReLU(), nn.Linear(64, pixels))

    def posterior(self, x) -> Normal:
        h = self.body(x)
        return Normal(self.loc(h), self.scale(h))

    def forward(self, x):
        q = self.posterior(x)
        z = q.rsample()
        return self.decoder(z), q


def elbo_loss(logits, x, q, beta: float = 1.0) -> torch.Tensor:
    prior = Normal(torch.zeros_like(q.loc), torch.ones_like(q.scale))
    recon = F.binary_cross_entropy_with_logits(logits, x, reduction="sum") / x.size(0)
    return recon + beta * kl_divergence(q, prior).sum() / x.size(0)


def kl_weight(step: int) -> float:
    """KL annealing: the KL term is phased in linearly over the first `warmup` steps."""
    return min(1.0, step / SETTINGS["warmup"])


@torch.no_grad()
def held_out_elbo(model: VAE, x: torch.Tensor) -> float:
    torch.manual_seed(1234)
    logits, q = model(x)
    return elbo_loss(logits, x, q).item()


@daifu.transform
def train(model, optimizer, held_out, ckpt_dir, start, stop, seed):
    gen = torch.Generator().manual_seed(seed)
    history = []
    for step in range(start, stop):
        x = glyphs(gen, SETTINGS["batch"], SETTINGS["side"])
        torch.manual_seed(seed * 100003 + step)  # the reparameterisation noise of this step
        logits, q = model(x)
        loss = elbo_loss(logits, x, q, kl_weight(step))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append(loss.item())
        if (step + 1) % SETTINGS["ckpt_every"] == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return {"steps": len(history), "train_loss": sum(history[-10:]) / max(len(history[-10:]), 1),
            "val_neg_elbo": held_out_elbo(model, held_out)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = VAE(SETTINGS["side"] ** 2, SETTINGS["latent"])
    optimizer = torch.optim.Adam(model.parameters(), lr=SETTINGS["lr"])
    start = load_checkpoint(resume, model, optimizer)
    held_out = glyphs(torch.Generator().manual_seed(seed + 50), 256, SETTINGS["side"])
    ckpt_dir = Path(workdir) / "ckpt"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, held_out, ckpt_dir, start, SETTINGS["steps"] if until is None else until, seed)
