"""SimCLR-style contrastive pre-training of a tabular encoder, counted in optimizer steps.

The script was converted from epochs to a step budget: it draws batches with
`next(data_iter)` from one iterator made before the loop. The loader holds eight batches;
the ninth `next()` raises StopIteration, which nothing catches.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

MAX_STEPS = 120
BATCH = 64
TEMPERATURE = 0.5
CKPT_EVERY = 40


class Rows(Dataset):
    """Feature rows drawn around 4 centres; the centre is the label, used only by the probe."""

    def __init__(self, seed: int, n: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        centres = torch.randn(4, 8, generator=gen) * 1.2
        self.labels = torch.randint(0, 4, (n,), generator=gen)
        signal = centres[self.labels] + 0.8 * torch.randn(n, 8, generator=gen)
        nuisance = 3.0 * torch.randn(n, 8, generator=gen)  # columns that carry no class information
        self.rows = torch.cat([signal, nuisance], dim=1)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i], self.labels[i]


def augment(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    keep = (torch.rand(x.shape, generator=gen) > 0.2).float()
    jitter = torch.cat([0.3 * torch.ones(8), 3.0 * torch.ones(8)])  # the nuisance columns vary freely
    return x * keep + jitter * torch.randn(x.shape, generator=gen)


def nt_xent(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    sim = z @ z.t() / temperature
    sim.fill_diagonal_(float("-inf"))
    n = z1.size(0)
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
    return F.cross_entropy(sim, targets)


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 32))
        self.proj = nn.Sequential(nn.ReLU(), nn.Linear(32, 16))

    def forward(self, x):
        return self.proj(self.body(x))


@torch.no_grad()
def knn_accuracy(encoder: Encoder, train: Rows, test: Rows) -> float:
    bank = F.normalize(encoder.body(train.rows), dim=1)
    query = F.normalize(encoder.body(test.rows), dim=1)
    nearest = (query @ bank.t()).argmax(dim=1)
    return (train.labels[nearest] == test.labels).float().mean().item()


@daifu.transform
def pretrain(encoder, optimizer, loader, probe, ckpt_dir, start, stop, seed):
    gen = torch.Generator().manual_seed(seed + 5)
    data_iter = iter(loader)
    losses = []
    for step in range(start, stop):
        x, _ = next(data_iter)
        loss = nt_xent(encoder(augment(x, gen)), encoder(augment(x, gen)), TEMPERATURE)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, encoder, optimizer)
    return {"steps": len(losses), "loss": sum(losses[-8:]) / max(len(losses[-8:]), 1),
            "knn_acc": knn_accuracy(encoder, *probe)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    train_rows, test_rows = Rows(seed, 512), Rows(seed, 1024)
    test_rows.rows, test_rows.labels = test_rows.rows[512:], test_rows.labels[512:]
    loader = DataLoader(train_rows, batch_size=BATCH, shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(seed))
    encoder = Encoder()
    optimizer = torch.optim.Adam(encoder.parameters(), lr=1e-3)
    start = load_checkpoint(resume, encoder, optimizer)
    ckpt_dir = Path(workdir) / "ckpt"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return pretrain(encoder, optimizer, loader, (train_rows, test_rows), ckpt_dir, start,
                    MAX_STEPS if until is None else until, seed)
