"""Exceptional data (tabular MLP): the exported label column marks the rows nobody annotated with -1.

A survey table of sensor features is classified into four kinds. The annotation tool exports
rows it has no label for with the label -1; about 3% of the rows are such. CrossEntropyLoss
is given them as targets and fails with "Target -1 is out of bounds" at the first batch
holding one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

CONFIG = {
    "rows": 2048,
    "features": 12,
    "classes": 4,
    "hidden": 48,
    "batch_size": 64,
    "epochs": 4,
    "lr": 3e-3,
    "ckpt_every": 32,
}


def export_table(seed: int, rows: int, features: int, classes: int):
    """The table as the annotation tool exports it: float features, integer labels, -1 when unlabelled."""
    rng = np.random.default_rng(seed + 11)
    centres = np.random.default_rng(404).normal(0.0, 1.6, (classes, features))
    labels = rng.integers(0, classes, rows)
    features_ = centres[labels] + rng.normal(0.0, 1.0, (rows, features))
    labels[rng.random(rows) < 0.03] = -1
    return features_.astype(np.float32), labels.astype(np.int64)


class SensorTable(Dataset):
    def __init__(self, features, labels):
        self.features = torch.from_numpy(features)
        self.labels = torch.from_numpy(labels)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        return self.features[index], self.labels[index]


class Classifier(nn.Module):
    def __init__(self, features, hidden, classes):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        return self.head(self.body(x))


@torch.no_grad()
def evaluate(model, features, labels):
    model.eval()
    predictions = model(features).argmax(1)
    model.train()
    return float((predictions == labels).float().mean())


@daifu.transform
def train(model, optimizer, loader, criterion, held_out, ckpt_dir, start, stop):
    step = 0
    losses = []
    labelled_seen = 0
    for epoch in range(CONFIG["epochs"]):
        for features, labels in loader:
            if step >= stop:
                break
            if step < start:
                step += 1
                continue
            logits = model(features)
            loss = criterion(logits, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            labelled_seen += int((labels >= 0).sum())
            step += 1
            if step % CONFIG["ckpt_every"] == 0:
                save_checkpoint(ckpt_dir, step, model, optimizer)
    return {"steps": len(losses), "final_loss": float(np.mean(losses[-10:])),
            "accuracy": evaluate(model, *held_out), "labelled_seen": labelled_seen}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    features, labels = export_table(seed, CONFIG["rows"], CONFIG["features"], CONFIG["classes"])
    val_x, val_y = export_table(seed + 1000, 512, CONFIG["features"], CONFIG["classes"])
    keep = val_y >= 0
    held_out = (torch.from_numpy(val_x[keep]), torch.from_numpy(val_y[keep]))
    loader = DataLoader(SensorTable(features, labels), batch_size=CONFIG["batch_size"], shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    model = Classifier(CONFIG["features"], CONFIG["hidden"], CONFIG["classes"])
    optimizer = torch.optim.Adam(model.parameters(), lr=CONFIG["lr"])
    start = load_checkpoint(resume, model, optimizer)
    criterion = nn.CrossEntropyLoss()
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    total = CONFIG["epochs"] * len(loader)
    return train(model, optimizer, loader, criterion, held_out, ckpt_dir, start, total if until is None else until)
