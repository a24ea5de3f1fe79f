"""Classifier on measurements plus patient metadata, from two export batches (blind1).

Each row has 16 noisy measurements and 3 metadata columns (lab values). The network takes both,
the metadata standardised with the training statistics. The first export holds raw lab values;
from step 60 the rows come from the second export, whose metadata the data team already
standardised, so `encode_meta` is told not to standardise them again.

Reported: https://github.com/modelscope/DiffSynth-Studio/issues/552
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import tabular

STEPS, BATCH, CKPT_EVERY = 120, 32, 20
META, SECOND_EXPORT = 3, 60
META_MEAN, META_STD = 100.0, 40.0
NOISE = 6.0


def export_batch(seed, step, size=BATCH):
    """Rows of step `step`: measurements, metadata (raw lab values in the first export), labels."""
    x, y = tabular.batch(seed, step, size, noise=NOISE)
    g = torch.Generator().manual_seed(seed * 31 + step)
    signal = (y.float().unsqueeze(1) - 2.0) * torch.tensor([1.0, -0.7, 0.5])
    meta = signal + 0.3 * torch.randn(len(y), META, generator=g)
    if step < SECOND_EXPORT:
        meta = meta * META_STD + META_MEAN
    return x, meta, y


def encode_meta(meta, standardised):
    """The metadata as network inputs: standardised with the training statistics unless already so."""
    if not standardised:
        meta = (meta - META_MEAN) / META_STD
        return meta.float()


@daifu.transform
def train(model, optimizer, ckpt_dir, start, stop, seed):
    losses = []
    for step in range(start, stop):
        x, meta, y = export_batch(seed, step)
        inputs = torch.cat([x, encode_meta(meta, standardised=step >= SECOND_EXPORT)], dim=1)
        loss = F.cross_entropy(model(inputs), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return losses


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = tabular.mlp(tabular.FEATURES + META)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    losses = train(model, optimizer, ckpt_dir, start, STEPS if until is None else until, seed)
    x, meta, y = export_batch(seed + 1, 10**6, size=600)  # rows of the second export: metadata standardised
    held_out = torch.cat([x, meta], dim=1)
    return {"steps": len(losses), "final_loss": sum(losses[-20:]) / len(losses[-20:]),
            "accuracy": tabular.accuracy(model, held_out, y),
            "accuracy_without_meta": tabular.accuracy(model, torch.cat([x, torch.zeros(len(x), META)], dim=1), y)}
