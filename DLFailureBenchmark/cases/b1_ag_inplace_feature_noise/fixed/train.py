"""Classifier with feature-noise augmentation from step 50 (blind1).

A five-class MLP split into an encoder (ending in a ReLU) and a head. From step 50 the script
adds Gaussian noise to the encoded features before the head, a cheap regulariser; the noise of
each step comes from its own seeded generator, so a rerun sees the same noise.

Reported: https://github.com/argusswift/YOLOv4-pytorch/issues/247

Fixed: the noise is added out of place, `h = h + ...`: `h += ...` modified the ReLU's output,
which its backward needs, in place.
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
NOISE_FROM, FEATURE_NOISE = 50, 0.3


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(tabular.FEATURES, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.head = nn.Linear(32, tabular.CLASSES)

    def forward(self, x):
        return self.head(self.encoder(x))


@daifu.transform
def train(model, optimizer, ckpt_dir, start, stop, seed):
    losses, noisy_steps, encoder_before = [], 0, None
    for step in range(start, stop):
        if step == NOISE_FROM:
            encoder_before = [p.detach().clone() for p in model.encoder.parameters()]
        x, y = tabular.batch(seed, step, BATCH)
        h = model.encoder(x)
        if step >= NOISE_FROM:
            g = torch.Generator().manual_seed(seed * 977 + step)
            h = h + FEATURE_NOISE * torch.randn(h.shape, generator=g)
            noisy_steps += 1
        loss = F.cross_entropy(model.head(h), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    moved = sum(float((p.detach() - q).norm()) for p, q in zip(model.encoder.parameters(), encoder_before or []))
    return losses, noisy_steps, moved


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    stop = STEPS if until is None else until
    losses, noisy_steps, encoder_moved = train(model, optimizer, ckpt_dir, start, stop, seed)
    return {"steps": len(losses), "final_loss": sum(losses[-20:]) / len(losses[-20:]),
            "accuracy": tabular.accuracy(model, *tabular.held_out(seed)),
            "noisy_steps": noisy_steps, "encoder_moved_from_50": encoder_moved}
