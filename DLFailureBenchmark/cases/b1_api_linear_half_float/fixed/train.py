"""Autoencoder with a second compression stage (blind1).

An MLP autoencoder compresses 16 features into an 8-wide code. At step 60, once the
reconstruction has settled, the script inserts a narrower bottleneck (half the code width) between
encoder and decoder, hands its parameters to the optimizer and trains on, to see how much a code
half as wide loses.

Reported: https://github.com/wengong-jin/icml18-jtnn/issues/26

Fixed: half the width with integer division, `CODE // 2`: `CODE / 2` is the float 4.0, which
`nn.Linear` cannot take as a size.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import tabular

STEPS, BATCH, CKPT_EVERY = 120, 32, 20
NOISE = 0.5
CODE, SQUEEZE_AT = 8, 60


class AutoEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(tabular.FEATURES, 32), nn.ReLU(), nn.Linear(32, CODE))
        self.bottleneck: nn.Module = nn.Identity()
        self.decoder = nn.Sequential(nn.Linear(CODE, 32), nn.ReLU(), nn.Linear(32, tabular.FEATURES))

    def forward(self, x):
        return self.decoder(self.bottleneck(self.encoder(x)))


@daifu.transform
def train(model, optimizer, ckpt_dir, start, stop, seed):
    losses = []
    for step in range(start, stop):
        if step == SQUEEZE_AT:
            half = CODE // 2
            squeeze = nn.Sequential(nn.Linear(CODE, half), nn.ReLU(), nn.Linear(half, CODE))
            optimizer.add_param_group({"params": list(squeeze.parameters())})
            model.bottleneck = squeeze
        x, _ = tabular.batch(seed, step, BATCH, noise=NOISE)
        loss = F.mse_loss(model(x), x)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % CKPT_EVERY == 0 and step + 1 < SQUEEZE_AT:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return losses


@torch.no_grad()
def evaluate(model, seed):
    x, _ = tabular.held_out(seed, noise=NOISE)
    widths = [m.out_features for m in model.bottleneck.modules() if isinstance(m, nn.Linear)]
    return {"recon_mse": float(F.mse_loss(model(x), x)), "code_width": min(widths, default=CODE)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = AutoEncoder()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    losses = train(model, optimizer, ckpt_dir, start, STEPS if until is None else until, seed)
    return {"steps": len(losses), "final_loss": sum(losses[-20:]) / len(losses[-20:]), **evaluate(model, seed)}
