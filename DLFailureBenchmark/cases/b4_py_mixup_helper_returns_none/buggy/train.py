"""Keyword spotting on MFCC-like frames with a 1-D CNN, trained with mixup for the first epochs.

A common recipe turns mixup off for the last epochs. `mixup_batch` only returns from its
mixing branch; the plain case falls off the end of the function: when mixup switches off
(epoch 3, step 60), the helper returns None and unpacking its result fails.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

KEYWORDS, FRAMES, COEFFS = 5, 40, 13
RECIPE = {"epochs": 4, "steps_per_epoch": 20, "batch": 32, "lr": 3e-3, "alpha": 0.4, "mixup_epochs": 3}


def utterances(gen: torch.Generator, n: int):
    """Each keyword is a sequence of 3 coefficient patterns; position and speed vary."""
    patterns = torch.randn(KEYWORDS, 3, COEFFS, generator=torch.Generator().manual_seed(5))
    labels = torch.randint(0, KEYWORDS, (n,), generator=gen)
    x = 0.5 * torch.randn(n, COEFFS, FRAMES, generator=gen)
    starts = torch.randint(0, 10, (n,), generator=gen)
    for i in range(n):
        s = int(starts[i])
        for part in range(3):
            x[i, :, s + part * 8:s + part * 8 + 8] += patterns[labels[i], part].unsqueeze(1)
    return x, labels


def mixup_batch(x, y, alpha: float, use_mixup: bool, gen: torch.Generator):
    """Mix the batch with a shuffled copy of itself; returns (x, y_a, y_b, lam)."""
    if use_mixup:
        lam = float(torch.distributions.Beta(alpha, alpha).sample())
        perm = torch.randperm(len(x), generator=gen)
        return lam * x + (1 - lam) * x[perm], y, y[perm], lam


class KeywordNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv1d(COEFFS, 32, 5, padding=2), nn.ReLU(), nn.Conv1d(32, 32, 5, padding=2),
                                 nn.ReLU(), nn.AdaptiveMaxPool1d(1), nn.Flatten(), nn.Linear(32, KEYWORDS))

    def forward(self, x):
        return self.net(x)


@daifu.transform
def train(model, optimizer, test, ckpt_dir, start, stop, seed):
    data_gen = torch.Generator().manual_seed(seed)
    mix_gen = torch.Generator().manual_seed(seed + 1)
    torch.manual_seed(seed + 2)  # the Beta draws of mixup
    losses, mixed_steps = [], 0
    for step in range(start, stop):
        epoch = step // RECIPE["steps_per_epoch"]
        xb, yb = utterances(data_gen, RECIPE["batch"])
        use_mixup = epoch < RECIPE["mixup_epochs"]
        xb, ya, yb2, lam = mixup_batch(xb, yb, RECIPE["alpha"], use_mixup, mix_gen)
        logits = model(xb)
        loss = lam * F.cross_entropy(logits, ya) + (1 - lam) * F.cross_entropy(logits, yb2)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        mixed_steps += int(use_mixup)
        if (step + 1) % RECIPE["steps_per_epoch"] == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    with torch.no_grad():
        acc = (model(test[0]).argmax(1) == test[1]).float().mean().item()
    return {"steps": len(losses), "mixed_steps": mixed_steps, "plain_steps": len(losses) - mixed_steps,
            "test_acc": acc, "final_loss": sum(losses[-10:]) / max(len(losses[-10:]), 1)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = KeywordNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=RECIPE["lr"])
    start = load_checkpoint(resume, model, optimizer)
    test = utterances(torch.Generator().manual_seed(seed + 77), 400)
    ckpt_dir = Path(workdir) / "ckpt"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    total = RECIPE["epochs"] * RECIPE["steps_per_epoch"]
    return train(model, optimizer, test, ckpt_dir, start, total if until is None else until, seed)
