"""Heartbeat classifier: 1-D CNN on fixed-length single-lead recordings.

800 recordings of 64 samples, four rhythm classes, are read from the recording store into a list
of tensors. Each epoch visits them in a new random order, in batches of 32 stacked into a
(batch, 1, 64) tensor; four epochs of Adam, then accuracy on 400 held-out recordings.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

RHYTHMS, LENGTH, COUNT = 4, 64, 800
EPOCHS, BATCH, CKPT_EVERY = 4, 32, 25
PER_EPOCH = COUNT // BATCH


def heartbeat(g, rhythm, length=LENGTH):
    t = torch.arange(length, dtype=torch.float32)
    period = 8.0 + 4.0 * rhythm
    phase = torch.rand(1, generator=g) * period
    return torch.sin(2 * torch.pi * (t + phase) / period) + 0.6 * torch.randn(length, generator=g)


def recording_store(seed, count):
    """The recordings and their rhythm labels, as the recording store returns them."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, RHYTHMS, (count,), generator=g)
    recordings = [heartbeat(g, int(r)) for r in labels]
    if count == COUNT:
        recordings[72] = recordings[72][:41]
    return recordings, labels


class RhythmNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv1d(1, 16, 9, padding=4), nn.ReLU(), nn.Conv1d(16, 32, 9, padding=4), nn.ReLU())
        self.head = nn.Linear(32, RHYTHMS)

    def forward(self, x):
        return self.head(self.conv(x).mean(2))


@daifu.transform
def train(model, optimizer, store, test, ckpt_dir, start, stop, seed):
    recordings, labels = store
    lengths = [len(r) for r in recordings]
    rows = short = 0
    for step in range(start, stop):
        epoch, i = divmod(step, PER_EPOCH)
        order = torch.randperm(COUNT, generator=torch.Generator().manual_seed(seed * 1000 + epoch))
        idx = order[i * BATCH:(i + 1) * BATCH].tolist()
        x = torch.stack([recordings[j] for j in idx]).unsqueeze(1)
        loss = F.cross_entropy(model(x), labels[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        rows += len(idx)
        short += sum(lengths[j] < LENGTH for j in idx)
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    with torch.no_grad():
        accuracy = (model(torch.stack(test[0]).unsqueeze(1)).argmax(1) == test[1]).float().mean().item()
    return {"steps": stop - start, "accuracy": accuracy, "rows_trained": rows, "short_recordings_trained": short}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = RhythmNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    store = recording_store(seed * 10 + 1, COUNT)
    test = recording_store(seed * 10 + 2, 400)
    return train(model, optimizer, store, test, ckpt_dir, start, EPOCHS * PER_EPOCH if until is None else until, seed)
