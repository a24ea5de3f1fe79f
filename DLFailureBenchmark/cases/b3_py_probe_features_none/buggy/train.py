"""Python error on a live object (encoder + k-NN probe): the probe's feature list holds only None.

The periodic k-NN probe needs the encoder's features; `forward_batch` returns them only when
asked (`with_features`), to spare memory in training. The run's settings were taken over from a
memory-tight run that turned `probe_features` off, so every feature comes back None and
`torch.cat` of the list fails at the first probe.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

settings = {"classes": 5, "dim": 20, "batch": 40, "steps": 150, "probe_every": 50, "save_every": 30,
            "lr": 2e-3, "probe_features": False, "k": 5}


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(settings["dim"], 64), nn.GELU(), nn.Linear(64, 16))
        self.head = nn.Linear(16, settings["classes"])


def forward_batch(model, x, with_features):
    features = model.encoder(x)
    logits = model.head(features)
    return logits, (features if with_features else None)


def clusters(seed, count):
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(settings["classes"], settings["dim"], generator=torch.Generator().manual_seed(77)) * 1.2
    labels = torch.randint(0, settings["classes"], (count,), generator=g)
    return centres[labels] + torch.randn(count, settings["dim"], generator=g), labels


@torch.no_grad()
def knn_probe(model, bank, queries, with_features):
    """Accuracy of a k-nearest-neighbour vote in feature space: how well the features separate classes."""
    bank_features = []
    for chunk in bank[0].split(100):
        _, features = forward_batch(model, chunk, with_features)
        bank_features.append(features)
    bank_features = F.normalize(torch.cat(bank_features), dim=1)
    _, query_features = forward_batch(model, queries[0], with_features)
    similarity = F.normalize(query_features, dim=1) @ bank_features.T
    neighbours = bank[1][similarity.topk(settings["k"], dim=1).indices]
    votes = F.one_hot(neighbours, settings["classes"]).sum(1)
    return float((votes.argmax(1) == queries[1]).float().mean())


@daifu.transform
def train(model, optimizer, data, bank, queries, ckpt_dir, seed, start, stop):
    x, y = data
    g = torch.Generator().manual_seed(seed)
    probes, losses = [], []
    for step in range(start, stop):
        index = torch.randint(0, len(y), (settings["batch"],), generator=g)
        logits, _ = forward_batch(model, x[index], with_features=False)
        loss = F.cross_entropy(logits, y[index])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % settings["probe_every"] == 0:
            probes.append(knn_probe(model, bank, queries, with_features=settings["probe_features"]))
        if (step + 1) % settings["save_every"] == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return {"steps": len(losses), "final_loss": sum(losses[-10:]) / 10,
            "knn_accuracy": probes[-1] if probes else 0.0, "probes": len(probes)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    data, bank, queries = clusters(seed, 2000), clusters(seed + 1, 500), clusters(seed + 2, 300)
    model = Encoder()
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings["lr"])
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, data, bank, queries, ckpt_dir, seed, start,
                 settings["steps"] if until is None else until)
