"""Variational autoencoder with a cyclical KL-weight schedule (blind1).

A small VAE on 1000 feature rows, four epochs of shuffled mini-batches of 64. The weight of the
KL term follows a cyclical annealing schedule (two cycles: a linear ramp from 0 to 1 over half a
cycle, then 1), precomputed for the whole run, one value per iteration.

Reported: https://github.com/haofuml/cyclical_annealing/issues/5
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import tabular

EPOCHS, ROWS, BATCH, CKPT_EVERY = 4, 1000, 64, 16
LATENT, CYCLES, NOISE = 4, 2, 0.5


def cyclical_schedule(n_iter, cycles=CYCLES, ratio=0.5):
    """One KL weight per iteration: in each cycle, 0 to 1 linearly over `ratio` of it, then 1."""
    period = n_iter / cycles
    return [min(1.0, (i % period) / (period * ratio)) for i in range(n_iter)]


class VAE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(tabular.FEATURES, 32), nn.ReLU(), nn.Linear(32, 2 * LATENT))
        self.dec = nn.Sequential(nn.Linear(LATENT, 32), nn.ReLU(), nn.Linear(32, tabular.FEATURES))

    def forward(self, x):
        mu, logvar = self.enc(x).chunk(2, dim=1)
        z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
        return self.dec(z), mu, logvar


def terms(model, x):
    recon, mu, logvar = model(x)
    rec = F.mse_loss(recon, x, reduction="sum") / len(x)
    kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum() / len(x)
    return rec, kl


@daifu.transform
def train(model, optimizer, data, ckpt_dir, start, stop, seed):
    betas = cyclical_schedule(EPOCHS * (ROWS // BATCH))
    losses, used = [], []
    step = 0
    for epoch in range(EPOCHS):
        order = torch.randperm(ROWS, generator=torch.Generator().manual_seed(seed * 1000 + epoch))
        for first in range(0, ROWS, BATCH):
            if step >= stop:
                return losses, used
            if step >= start:
                beta = betas[step]
                rec, kl = terms(model, data[order[first:first + BATCH]])
                loss = rec + beta * kl
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
                used.append(beta)
                if (step + 1) % CKPT_EVERY == 0:
                    save_checkpoint(ckpt_dir, step + 1, model, optimizer)
            step += 1
    return losses, used


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = VAE()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    data, _ = tabular.held_out(seed + 5, size=ROWS, noise=NOISE)
    losses, used = train(model, optimizer, data, ckpt_dir, start, 10**9 if until is None else until, seed)
    with torch.no_grad():
        rec, kl = terms(model, tabular.held_out(seed, size=400, noise=NOISE)[0])
    return {"steps": len(losses), "final_loss": sum(losses[-16:]) / len(losses[-16:]), "held_out_elbo": float(rec + kl),
            "held_out_kl": float(kl), "final_beta": used[-1], "full_weight_steps": sum(b == 1.0 for b in used)}
