"""A small GAN that learns a 2-D Gaussian (a sensor's joint reading), with a discriminator warm-up.

The generator maps 4-D noise to 2-D points; the discriminator scores points with a logit. For the
first 30 steps only the discriminator trains (a common trick so that the generator starts with a
useful signal); after that each step updates the discriminator, then the generator, with
non-saturating BCE losses. Scored: how far the generated points' mean and spread are from the
data's, on 2000 samples.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu

Z, BATCH, STEPS, CKPT_EVERY = 4, 64, 240, 40
G_FROM = 30
MEAN, STD = torch.tensor([2.0, -1.0]), torch.tensor([0.5, 0.3])


def real_points(g, count):
    return MEAN + STD * torch.randn(count, 2, generator=g)


def save(ckpt_dir, step, nets, opt_g, opt_d):
    torch.save({"nets": nets.state_dict(), "opt_g": opt_g.state_dict(), "opt_d": opt_d.state_dict(), "step": step},
               Path(ckpt_dir) / "last.pt")


@daifu.transform
def train(nets, opt_g, opt_d, ckpt_dir, start, stop, seed):
    generator, discriminator = nets["generator"], nets["discriminator"]
    ones, zeros = torch.ones(BATCH, 1), torch.zeros(BATCH, 1)
    g_updates = 0
    for step in range(start, stop):
        g = torch.Generator().manual_seed(seed * 100_003 + step)
        real = real_points(g, BATCH)
        fake = generator(torch.randn(BATCH, Z, generator=g))
        d_real, d_fake = discriminator(real), discriminator(fake)
        loss_d = F.binary_cross_entropy_with_logits(d_real, ones) + F.binary_cross_entropy_with_logits(d_fake, zeros)
        opt_d.zero_grad()
        loss_d.backward(retain_graph=True)
        opt_d.step()
        if step >= G_FROM:
            loss_g = F.binary_cross_entropy_with_logits(d_fake, ones)
            opt_g.zero_grad()
            loss_g.backward()
            opt_g.step()
            g_updates += 1
        if (step + 1) % CKPT_EVERY == 0:
            save(ckpt_dir, step + 1, nets, opt_g, opt_d)
    with torch.no_grad():
        sample = generator(torch.randn(2000, Z, generator=torch.Generator().manual_seed(seed + 99)))
    return {"steps": stop - start, "g_updates": g_updates,
            "mean_error": (sample.mean(0) - MEAN).norm().item(), "std_error": (sample.std(0) - STD).norm().item()}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    nets = nn.ModuleDict({
        "generator": nn.Sequential(nn.Linear(Z, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 2)),
        "discriminator": nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 32), nn.LeakyReLU(0.2),
                                       nn.Linear(32, 1)),
    })
    opt_g = torch.optim.Adam(nets["generator"].parameters(), lr=2e-3, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(nets["discriminator"].parameters(), lr=2e-3, betas=(0.5, 0.999))
    start = 0
    if resume is not None:
        state = torch.load(resume, weights_only=True)
        nets.load_state_dict(state["nets"])
        opt_g.load_state_dict(state["opt_g"])
        opt_d.load_state_dict(state["opt_d"])
        start = state["step"]
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(nets, opt_g, opt_d, ckpt_dir, start, STEPS if until is None else until, seed)
