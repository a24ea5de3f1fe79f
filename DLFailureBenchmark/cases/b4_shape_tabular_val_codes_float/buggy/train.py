"""Tabular classifier with categorical embeddings (credit-default style); validation read from a CSV file.

The training table is encoded in memory: category codes as int64, numbers as float32. The
validation table is written to CSV by the export step and read back with `np.loadtxt`, then
turned into one float tensor whose first two columns are the category codes. The first
validation (step 30) hands float codes to `nn.Embedding`, which takes integer indices only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

N_REGIONS, N_PRODUCTS, N_NUMERIC = 12, 7, 5
CFG = {"batch": 64, "steps": 120, "lr": 3e-3, "val_every": 30, "emb": 6}


def applications(seed: int, n: int):
    gen = torch.Generator().manual_seed(seed)
    region = torch.randint(0, N_REGIONS, (n,), generator=gen)
    product = torch.randint(0, N_PRODUCTS, (n,), generator=gen)
    numeric = torch.randn(n, N_NUMERIC, generator=gen)
    region_risk = torch.linspace(-1.5, 1.5, N_REGIONS)[region]
    product_risk = torch.linspace(1.0, -1.0, N_PRODUCTS)[product]
    score = region_risk + product_risk + numeric[:, 0] - 0.5 * numeric[:, 1] + 0.3 * torch.randn(n, generator=gen)
    return torch.stack([region, product], dim=1), numeric, (score > 0).long()


def export_csv(path: Path, cats, nums, labels) -> None:
    table = torch.cat([cats.float(), nums, labels.float().unsqueeze(1)], dim=1).numpy()
    np.savetxt(path, table, delimiter=",", fmt="%.6f")


def read_csv(path: Path):
    table = torch.tensor(np.loadtxt(path, delimiter=",")).float()
    return table[:, :2], table[:, 2:2 + N_NUMERIC], table[:, -1].long()


class CreditNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.region = nn.Embedding(N_REGIONS, CFG["emb"])
        self.product = nn.Embedding(N_PRODUCTS, CFG["emb"])
        self.mlp = nn.Sequential(nn.Linear(2 * CFG["emb"] + N_NUMERIC, 32), nn.ReLU(), nn.Linear(32, 2))

    def forward(self, cats, nums):
        h = torch.cat([self.region(cats[:, 0]), self.product(cats[:, 1]), nums], dim=1)
        return self.mlp(h)


@torch.no_grad()
def evaluate(model: CreditNet, val) -> float:
    cats, nums, labels = val
    return (model(cats, nums).argmax(1) == labels).float().mean().item()


@daifu.transform
def train(model, optimizer, train_data, val, ckpt_dir, start, stop, seed):
    cats_all, nums_all, labels_all = train_data
    gen = torch.Generator().manual_seed(seed)
    history, losses = [], []
    for step in range(start, stop):
        idx = torch.randint(0, len(labels_all), (CFG["batch"],), generator=gen)
        loss = F.cross_entropy(model(cats_all[idx], nums_all[idx]), labels_all[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % CFG["val_every"] == 0:
            history.append(evaluate(model, val))
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return {"steps": len(losses), "val_checks": len(history), "val_acc": evaluate(model, val)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    work = Path(workdir)
    (work / "ckpt").mkdir(parents=True, exist_ok=True)
    train_data = applications(seed, 3000)
    export_csv(work / "validation.csv", *applications(seed + 1, 600))
    val = read_csv(work / "validation.csv")
    model = CreditNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=CFG["lr"])
    start = load_checkpoint(resume, model, optimizer)
    return train(model, optimizer, train_data, val, work / "ckpt", start, CFG["steps"] if until is None else until, seed)
