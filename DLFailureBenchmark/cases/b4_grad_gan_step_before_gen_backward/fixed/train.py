"""A small GAN learning a 1-D Gaussian (the shape of many "GAN in 50 lines" scripts).

Both losses come from one pass of the discriminator over the fakes. The discriminator's
optimizer steps (changing D's weights in place) before the generator's loss is back-propagated
through that same D pass: PyTorch >= 1.5 refuses, the saved weights are at a newer version.

Fixed: the generator's loss is computed after the discriminator's step, from a new D pass.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

import daifu

HP = dict(steps=300, batch=64, noise=4, lr_g=2e-3, lr_d=2e-3, ckpt_every=50, eval_samples=2000)


def real_samples(gen: torch.Generator, n: int) -> torch.Tensor:
    return 3.0 + 0.5 * torch.randn(n, 1, generator=gen)


def generator() -> nn.Module:
    return nn.Sequential(nn.Linear(HP["noise"], 32), nn.LeakyReLU(0.2), nn.Linear(32, 32), nn.LeakyReLU(0.2),
                         nn.Linear(32, 1))


def discriminator() -> nn.Module:
    return nn.Sequential(nn.Linear(1, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1), nn.Sigmoid())


def wasserstein_1d(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.flatten().sort().values - b.flatten().sort().values).abs().mean().item()


def save(folder: Path, step: int, G, D, opt_g, opt_d) -> None:
    torch.save({"G": G.state_dict(), "D": D.state_dict(), "opt_g": opt_g.state_dict(),
                "opt_d": opt_d.state_dict(), "step": step}, folder / "last.pt")


@daifu.transform
def fit(G, D, opt_g, opt_d, ckpt_dir, start, stop, seed):
    gen = torch.Generator().manual_seed(seed + 17)
    eps = 1e-7
    d_losses, g_losses = [], []
    for step in range(start, stop):
        real = real_samples(gen, HP["batch"])
        z = torch.randn(HP["batch"], HP["noise"], generator=gen)
        fake = G(z)
        p_real, p_fake = D(real), D(fake)
        d_loss = -(torch.log(p_real + eps) + torch.log(1 - p_fake + eps)).mean()
        opt_d.zero_grad()
        d_loss.backward(retain_graph=True)
        opt_d.step()
        opt_g.zero_grad()
        g_loss = -torch.log(D(fake) + eps).mean()
        g_loss.backward()
        opt_g.step()
        d_losses.append(d_loss.item())
        g_losses.append(g_loss.item())
        if (step + 1) % HP["ckpt_every"] == 0:
            save(ckpt_dir, step + 1, G, D, opt_g, opt_d)
    with torch.no_grad():
        check = torch.Generator().manual_seed(seed + 99)
        w1 = wasserstein_1d(G(torch.randn(HP["eval_samples"], HP["noise"], generator=check)),
                            real_samples(check, HP["eval_samples"]))
    return {"steps": len(g_losses), "w1": w1, "d_loss": d_losses[-1] if d_losses else None}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    G, D = generator(), discriminator()
    opt_g = torch.optim.Adam(G.parameters(), lr=HP["lr_g"], betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(D.parameters(), lr=HP["lr_d"], betas=(0.5, 0.999))
    start = 0
    if resume:
        state = torch.load(resume, weights_only=True)
        G.load_state_dict(state["G"]), D.load_state_dict(state["D"])
        opt_g.load_state_dict(state["opt_g"]), opt_d.load_state_dict(state["opt_d"])
        start = state["step"]
    ckpt_dir = Path(workdir) / "gan"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return fit(G, D, opt_g, opt_d, ckpt_dir, start, HP["steps"] if until is None else until, seed)
