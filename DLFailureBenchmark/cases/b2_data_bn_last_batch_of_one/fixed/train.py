"""Tabular classifier with batch normalisation: sensor readings of four machine states.

641 labelled readings (20 features) are shuffled into batches of 32 each epoch by a DataLoader; a
three-layer MLP with BatchNorm1d after each hidden layer is trained with Adam for five epochs and
scored on 400 held-out readings.

Fixed: the loader drops the last, incomplete batch (`drop_last=True`): 641 = 20 * 32 + 1 leaves a
batch of one reading, on which BatchNorm cannot compute batch statistics in training mode.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

TRAIN, TEST, FEATURES, CLASSES = 641, 400, 20, 4
EPOCHS, BATCH, CKPT_EVERY = 5, 32, 25


def readings(seed, count):
    """`count` readings and their machine state; each state has its own mean and correlation pattern."""
    states = torch.Generator().manual_seed(7)
    means = torch.randn(CLASSES, FEATURES, generator=states) * 0.9
    mixing = torch.randn(CLASSES, FEATURES, FEATURES, generator=states) * 0.3
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, CLASSES, (count,), generator=g)
    noise = torch.randn(count, 1, FEATURES, generator=g)
    x = means[y] + (noise @ mixing[y]).squeeze(1) + 0.5 * torch.randn(count, FEATURES, generator=g)
    return x, y


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(FEATURES, 64), nn.BatchNorm1d(64), nn.ReLU(),
            nn.Linear(64, 64), nn.BatchNorm1d(64), nn.ReLU(),
        )
        self.head = nn.Linear(64, CLASSES)

    def forward(self, x):
        return self.head(self.body(x))


@daifu.transform
def train(model, optimizer, train_set, test, ckpt_dir, start, stop, seed):
    samples = 0
    step = 0
    for epoch in range(EPOCHS):
        loader = DataLoader(train_set, batch_size=BATCH, shuffle=True,
                            generator=torch.Generator().manual_seed(seed * 1000 + epoch), drop_last=True)
        for x, y in loader:
            if step >= stop:
                break
            if step >= start:
                loss = F.cross_entropy(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                samples += len(y)
                if (step + 1) % CKPT_EVERY == 0:
                    save_checkpoint(ckpt_dir, step + 1, model, optimizer)
            step += 1
    model.eval()
    with torch.no_grad():
        accuracy = (model(test[0]).argmax(1) == test[1]).float().mean().item()
    return {"steps": step - start, "accuracy": accuracy, "samples_trained": samples}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = Classifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    train_set = TensorDataset(*readings(seed * 10 + 1, TRAIN))
    test = readings(seed * 10 + 2, TEST)
    return train(model, optimizer, train_set, test, ckpt_dir, start, 10**9 if until is None else until, seed)
