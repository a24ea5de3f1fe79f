"""Topic classifier on document embeddings, trained from annotation rounds.

Each step takes 64 documents (48-dimensional embeddings) with the topic the annotators gave them,
out of ten topics. The first 60 steps use the pilot round; from step 60 the documents come from the
second, larger round, exported by the annotation tool. A two-layer MLP is trained with Adam and
scored on 1000 held-out documents.

Fixed: the second round marks a skipped document with topic -1 ("no label"); the loss leaves those
documents out (`ignore_index=-1`) and averages over the labelled ones.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

TOPICS, DIM = 10, 48
STEPS, BATCH, CKPT_EVERY = 150, 64, 25
SECOND_ROUND = 60


def topic_centres():
    return torch.randn(TOPICS, DIM, generator=torch.Generator().manual_seed(11)) * 0.55


def documents(g, count):
    y = torch.randint(0, TOPICS, (count,), generator=g)
    return topic_centres()[y] + torch.randn(count, DIM, generator=g), y


def annotation_batch(seed, step):
    """The documents of `step` as the annotation tool exported them."""
    g = torch.Generator().manual_seed(seed * 100_003 + step)
    x, y = documents(g, BATCH)
    if step >= SECOND_ROUND:
        skipped = torch.rand(BATCH, generator=g) < 0.35
        y = torch.where(skipped, torch.full_like(y, -1), y)
    return x, y


@daifu.transform
def train(model, optimizer, test, ckpt_dir, start, stop, seed):
    labelled = 0
    for step in range(start, stop):
        x, y = annotation_batch(seed, step)
        loss = F.cross_entropy(model(x), y, ignore_index=-1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        labelled += int((y >= 0).sum())
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    with torch.no_grad():
        probs = F.softmax(model(test[0]), dim=1)
    others = test[1] != 0
    return {"steps": stop - start, "accuracy": (probs.argmax(1) == test[1]).float().mean().item(),
            "topic0_prob_on_others": probs[others, 0].mean().item(), "labelled_rows_trained": labelled}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(DIM, 96), nn.ReLU(), nn.Linear(96, TOPICS))
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    test = documents(torch.Generator().manual_seed(seed * 7 + 5), 1000)
    return train(model, optimizer, test, ckpt_dir, start, STEPS if until is None else until, seed)
