"""Tensor size computed with `/` above the crash (1-D GAN): the number of fake samples is a float.

The discriminator is trained on batches half real, half generated; the script computes
`n_fake = len(real) / 2`, a float in Python 3, and `torch.randn(n_fake, LATENT)` rejects it at
the first step.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import save_checkpoint

LATENT, BATCH, STEPS, SAVE_EVERY = 4, 64, 300, 50
TARGET_MEAN, TARGET_STD = 3.0, 0.5


class GAN(nn.Module):
    def __init__(self):
        super().__init__()
        self.generator = nn.Sequential(nn.Linear(LATENT, 16), nn.ReLU(), nn.Linear(16, 1))
        self.discriminator = nn.Sequential(nn.Linear(1, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))


class Optimizers(torch.optim.Optimizer):
    """The generator's and the discriminator's Adam, saved together in one checkpoint."""

    def __init__(self, gan):
        self.g = torch.optim.Adam(gan.generator.parameters(), lr=2e-3, betas=(0.5, 0.999))
        self.d = torch.optim.Adam(gan.discriminator.parameters(), lr=2e-3, betas=(0.5, 0.999))
        super().__init__(list(gan.parameters()), {})

    def state_dict(self):
        return {"g": self.g.state_dict(), "d": self.d.state_dict()}

    def load_state_dict(self, state):
        self.g.load_state_dict(state["g"])
        self.d.load_state_dict(state["d"])


def real_batch(g, size):
    return TARGET_MEAN + TARGET_STD * torch.randn(size, 1, generator=g)


@daifu.transform
def train(gan, opt, ckpt_dir, seed, start, stop):
    g = torch.Generator().manual_seed(seed)
    d_losses, g_steps = [], 0
    for step in range(start, stop):
        real = real_batch(g, BATCH)
        n_fake = len(real) / 2
        z = torch.randn(n_fake, LATENT, generator=g)
        fake = gan.generator(z)
        d_real = gan.discriminator(real)
        d_fake = gan.discriminator(fake.detach())
        d_loss = (F.binary_cross_entropy_with_logits(d_real, torch.ones_like(d_real))
                  + F.binary_cross_entropy_with_logits(d_fake, torch.zeros_like(d_fake)))
        opt.d.zero_grad()
        d_loss.backward()
        opt.d.step()
        d_out = gan.discriminator(gan.generator(torch.randn(BATCH, LATENT, generator=g)))
        g_loss = F.binary_cross_entropy_with_logits(d_out, torch.ones_like(d_out))
        opt.g.zero_grad()
        g_loss.backward()
        opt.g.step()
        g_steps += 1
        d_losses.append(d_loss.item())
        if (step + 1) % SAVE_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, gan, opt)
    with torch.no_grad():
        samples = gan.generator(torch.randn(2000, LATENT, generator=torch.Generator().manual_seed(seed + 9)))
    return {"steps": g_steps, "final_loss": sum(d_losses[-20:]) / 20, "fake_mean": float(samples.mean()),
            "fake_std": float(samples.std()), "generator_steps": g_steps}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    gan = GAN()
    opt = Optimizers(gan)
    start = 0
    if resume is not None:
        state = torch.load(resume, weights_only=True)
        gan.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = int(state["step"])
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(gan, opt, ckpt_dir, seed, start, STEPS if until is None else until)
