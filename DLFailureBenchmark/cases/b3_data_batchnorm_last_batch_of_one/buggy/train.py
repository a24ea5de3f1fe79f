"""Exceptional data (churn MLP with BatchNorm): the dataset size leaves a last batch of one sample.

The customer table has 641 rows and the loader takes 64 a batch, so each epoch ends with a batch
of a single row. BatchNorm1d cannot compute batch statistics from one value per channel while
training and raises at the end of the first epoch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

BATCH_SIZE = 64
EPOCHS = 4
LEARNING_RATE = 1e-2
SAVE_EVERY = 15


class Customers(Dataset):
    """Usage features per customer and whether they left (1) or stayed (0)."""

    def __init__(self, seed, count):
        g = torch.Generator().manual_seed(seed)
        self.usage = torch.randn(count, 10, generator=g) * 3.0 + 5.0
        score = self.usage[:, :4].sum(1) - self.usage[:, 4:7].sum(1) + torch.randn(count, generator=g)
        self.left = (score > 5.0).long()

    def __len__(self):
        return len(self.left)

    def __getitem__(self, index):
        return self.usage[index], self.left[index]


def churn_model():
    return nn.Sequential(
        nn.Linear(10, 32), nn.BatchNorm1d(32), nn.ReLU(),
        nn.Linear(32, 32), nn.BatchNorm1d(32), nn.ReLU(),
        nn.Linear(32, 2),
    )


@torch.no_grad()
def evaluate(model, dataset):
    model.eval()
    logits = model(dataset.usage)
    model.train()
    return float((logits.argmax(1) == dataset.left).float().mean())


@daifu.transform
def train(model, optimizer, loader, validation, ckpt_dir, start, stop):
    step = 0
    losses = []
    singletons = 0
    for epoch in range(EPOCHS):
        for usage, left in loader:
            if step >= stop:
                break
            if step < start:
                step += 1
                continue
            loss = nn.functional.cross_entropy(model(usage), left)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            singletons += int(len(left) == 1)
            step += 1
            if step % SAVE_EVERY == 0:
                save_checkpoint(ckpt_dir, step, model, optimizer)
    batchnorms = sum(isinstance(m, nn.BatchNorm1d) for m in model.modules())
    return {"steps": len(losses), "final_loss": float(np.mean(losses[-10:])), "accuracy": evaluate(model, validation),
            "singleton_batches_trained": singletons, "batchnorm_layers": batchnorms}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    dataset = Customers(seed, 641)
    validation = Customers(seed + 1, 400)
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True, generator=torch.Generator().manual_seed(seed))
    model = churn_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=0.9)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    total = EPOCHS * (len(dataset) // BATCH_SIZE)
    return train(model, optimizer, loader, validation, ckpt_dir, start, total if until is None else until)
