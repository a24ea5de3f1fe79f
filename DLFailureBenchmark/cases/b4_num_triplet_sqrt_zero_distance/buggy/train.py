"""Metric learning with a triplet margin loss, Euclidean distances written out by hand.

Positives are drawn from the anchor's class, and now and then the draw returns the anchor
itself: the anchor-positive distance is exactly 0, and the gradient of `sqrt` at 0 is infinite
(inf * 0 = nan). Anomaly detection, left on from an earlier debugging session, turns the NaN
gradient into an error in `backward()` instead of letting it spoil the weights silently.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

PARAMS = dict(classes=6, per_class=60, dim_in=20, dim_out=8, triplets=48, margin=0.5, steps=120, lr=2e-3,
              ckpt_every=40)


def clustered(seed: int):
    centres = torch.randn(PARAMS["classes"], PARAMS["dim_in"], generator=torch.Generator().manual_seed(2024)) * 0.6
    gen = torch.Generator().manual_seed(seed)
    labels = torch.arange(PARAMS["classes"]).repeat_interleave(PARAMS["per_class"])
    x = centres[labels] + torch.randn(len(labels), PARAMS["dim_in"], generator=gen)
    return x, labels


def sample_triplets(gen: torch.Generator, labels: torch.Tensor, count: int):
    anchors = torch.randint(0, len(labels), (count,), generator=gen)
    same = labels.unsqueeze(0) == labels[anchors].unsqueeze(1)
    pos = torch.multinomial(same.float(), 1, generator=gen).squeeze(1)
    neg = torch.multinomial((~same).float(), 1, generator=gen).squeeze(1)
    return anchors, pos, neg


class Embedder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(PARAMS["dim_in"], 64), nn.ReLU(), nn.Linear(64, PARAMS["dim_out"]))

    def forward(self, x):
        return self.net(x)


@torch.no_grad()
def centroid_accuracy(model: Embedder, train, test) -> float:
    (x_tr, y_tr), (x_te, y_te) = train, test
    emb = model(x_tr)
    centroids = torch.stack([emb[y_tr == c].mean(0) for c in range(PARAMS["classes"])])
    pred = torch.cdist(model(x_te), centroids).argmin(1)
    return (pred == y_te).float().mean().item()


@daifu.transform
def train(model, optimizer, data, test, ckpt_dir, start, stop, seed):
    x, labels = data
    gen = torch.Generator().manual_seed(seed)
    losses = []
    for step in range(start, stop):
        a, p, n = sample_triplets(gen, labels, PARAMS["triplets"])
        ea, ep, en = model(x[a]), model(x[p]), model(x[n])
        d_ap = torch.sqrt(((ea - ep) ** 2).sum(dim=1))
        d_an = torch.sqrt(((ea - en) ** 2).sum(dim=1))
        loss = F.relu(d_ap - d_an + PARAMS["margin"]).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % PARAMS["ckpt_every"] == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    finite = all(torch.isfinite(q).all().item() for q in model.parameters())
    return {"steps": len(losses), "centroid_acc": centroid_accuracy(model, data, test), "finite_weights": int(finite),
            "train_loss": sum(losses[-10:]) / max(len(losses[-10:]), 1)}


def main(workdir, seed=0, resume=None, until=None):
    torch.autograd.set_detect_anomaly(True)  # left on while chasing an earlier NaN
    torch.manual_seed(seed)
    x, labels = clustered(seed)
    test = clustered(seed + 1)
    model = Embedder()
    optimizer = torch.optim.Adam(model.parameters(), lr=PARAMS["lr"])
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "ckpt"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, (x, labels), test, ckpt_dir, start, PARAMS["steps"] if until is None else until,
                 seed)
