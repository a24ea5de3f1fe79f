"""Embedding model for product retrieval, trained with a cosine classifier, checked by centroids.

An MLP maps 30-dimensional item descriptors to 16-dimensional embeddings; training uses a cosine
softmax over 12 product families (unit-length embeddings, scaled logits). Every 50 steps the
script embeds a gallery of 1200 items in chunks, takes each family's centroid, and measures how
often the nearest centroid of a query's embedding is its family (600 queries).

Fixed: `embed` returns the raw embeddings when `l2=False`; it fell off its end and returned None,
which the evaluation's `torch.cat` received.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

FAMILIES, DIM, EMBED = 12, 30, 16
STEPS, BATCH, EVAL_EVERY, CKPT_EVERY, SCALE = 150, 64, 50, 25, 10.0


def products(g, count):
    centres = torch.randn(FAMILIES, DIM, generator=torch.Generator().manual_seed(17)) * 0.5
    y = torch.randint(0, FAMILIES, (count,), generator=g)
    return centres[y] + torch.randn(count, DIM, generator=g), y


class Embedder(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(DIM, 64), nn.ReLU(), nn.Linear(64, EMBED))
        self.classes = nn.Parameter(torch.randn(FAMILIES, EMBED) * 0.1)


def embed(model, x, l2=True):
    """The embeddings of `x`, scaled to unit length unless `l2=False` (centroids average raw ones)."""
    z = model.body(x)
    if l2:
        return F.normalize(z, dim=1)
    return z


def evaluate(model, gallery, queries):
    """Nearest-centroid accuracy of the queries, with the centroids of the gallery's families."""
    with torch.no_grad():
        parts = [embed(model, chunk, l2=False) for chunk in gallery[0].split(300)]
        g_emb = torch.cat(parts)
        centroids = torch.stack([g_emb[gallery[1] == c].mean(0) for c in range(FAMILIES)])
        scores = embed(model, queries[0]) @ F.normalize(centroids, dim=1).T
    return (scores.argmax(1) == queries[1]).float().mean().item()


@daifu.transform
def train(model, optimizer, gallery, queries, ckpt_dir, start, stop, seed):
    accuracies = []
    for step in range(start, stop):
        x, y = products(torch.Generator().manual_seed(seed * 100_003 + step), BATCH)
        logits = SCALE * embed(model, x) @ F.normalize(model.classes, dim=1).T
        loss = F.cross_entropy(logits, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (step + 1) % EVAL_EVERY == 0:
            accuracies.append(evaluate(model, gallery, queries))
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return {"steps": stop - start, "evals": len(accuracies),
            "centroid_accuracy": accuracies[-1] if accuracies else 0.0}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = Embedder()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    gallery = products(torch.Generator().manual_seed(seed * 7 + 1), 1200)
    queries = products(torch.Generator().manual_seed(seed * 7 + 2), 600)
    return train(model, optimizer, gallery, queries, ckpt_dir, start, STEPS if until is None else until, seed)
