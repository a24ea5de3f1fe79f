"""Environment (denoising autoencoder that saves reconstructions): the epoch's sample folder already exists.

At the end of each epoch the script writes reconstructions to `samples/epoch_<n>/`, made with
`os.mkdir`. The run directory is reused from an earlier, interrupted run that had already
written `samples/epoch_0/`; `os.mkdir` raises FileExistsError at the end of the first epoch.

Fixed: `os.makedirs(epoch_dir, exist_ok=True)`.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch import nn

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

EPOCHS, BATCHES_PER_EPOCH, BATCH, NOISE, SAVE_EVERY = 4, 25, 32, 0.3, 20


def signals(seed, count):
    g = torch.Generator().manual_seed(seed)
    t = torch.linspace(0, 1, 32)
    freq = 1 + 4 * torch.rand(count, 1, generator=g)
    phase = 6.28 * torch.rand(count, 1, generator=g)
    return torch.sin(6.28 * freq * t + phase)


def autoencoder():
    return nn.Sequential(nn.Linear(32, 16), nn.Tanh(), nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 16), nn.Tanh(),
                         nn.Linear(16, 32))


def save_samples(folder, model, clean, g):
    with torch.no_grad():
        noisy = clean[:8] + NOISE * torch.randn(8, 32, generator=g)
        np.save(folder / "reconstructions.npy", model(noisy).numpy())


@daifu.transform
def train(model, optimizer, data, samples_dir, seed, ckpt_dir, start, stop):
    g = torch.Generator().manual_seed(seed)
    losses = []
    step = 0
    for epoch in range(EPOCHS):
        for _ in range(BATCHES_PER_EPOCH):
            rows = torch.randint(0, len(data), (BATCH,), generator=g)
            noise = NOISE * torch.randn(BATCH, 32, generator=g)
            if step >= stop:
                break
            if step < start:
                step += 1
                continue
            loss = nn.functional.mse_loss(model(data[rows] + noise), data[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            step += 1
            if step % SAVE_EVERY == 0:
                save_checkpoint(ckpt_dir, step, model, optimizer)
        epoch_dir = samples_dir / f"epoch_{epoch}"
        os.makedirs(epoch_dir, exist_ok=True)
        save_samples(epoch_dir, model, data, g)
    saved = sum(1 for _ in samples_dir.glob("epoch_*/reconstructions.npy"))
    kept = float((samples_dir / "epoch_0" / "notes.txt").exists())
    with torch.no_grad():
        test = signals(seed + 1, 300)
        test_mse = float(nn.functional.mse_loss(model(test + NOISE * torch.randn(300, 32, generator=g)), test))
    return {"steps": len(losses), "final_loss": sum(losses[-10:]) / 10, "test_mse": test_mse,
            "sample_folders": saved, "earlier_notes_kept": kept}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    run = Path(workdir) / "dae-run"
    samples_dir = run / "samples"
    (samples_dir / "epoch_0").mkdir(parents=True, exist_ok=True)  # left by the earlier, interrupted run
    (samples_dir / "epoch_0" / "notes.txt").write_text("first try: lr 1e-2 diverged after 300 steps\n")
    model = autoencoder()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = run / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    total = EPOCHS * BATCHES_PER_EPOCH
    return train(model, optimizer, signals(seed, 2000), samples_dir, seed, ckpt_dir, start,
                 total if until is None else until)
