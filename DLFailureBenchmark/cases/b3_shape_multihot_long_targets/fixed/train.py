"""Tensor dtype made in a callee (multi-label tagger): the multi-hot targets are built as int64.

Each photo carries a set of tags. `multi_hot` turns the tag lists into a (batch, tags) matrix
for `BCEWithLogitsLoss`; it allocates it with `dtype=torch.long` (the tags are integers, after
all), and the loss cannot write a float result into a Long target type.

Fixed: `multi_hot` builds float targets, as `BCEWithLogitsLoss` takes them.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

TAGS, FEATURES = 6, 24
BATCH, STEPS, SAVE_EVERY, LR = 32, 140, 35, 3e-3


def photos(seed, count):
    """Image embeddings and their tag lists: tag t is present when feature block t is bright."""
    g = torch.Generator().manual_seed(seed)
    present = torch.rand(count, TAGS, generator=g) < 0.3
    x = torch.randn(count, FEATURES, generator=g)
    x[:, :TAGS * 4] += 2.0 * present.repeat_interleave(4, dim=1)
    tag_lists = [torch.nonzero(row).flatten().tolist() for row in present]
    return x, tag_lists


def multi_hot(tag_lists, count):
    targets = torch.zeros(len(tag_lists), count, dtype=torch.float32)
    for row, tags in enumerate(tag_lists):
        targets[row, tags] = 1
    return targets


@torch.no_grad()
def tag_f1(model, x, tag_lists):
    predicted = model(x) > 0
    truth = multi_hot(tag_lists, TAGS).bool()
    tp = (predicted & truth).sum().item()
    return 2 * tp / max(predicted.sum().item() + truth.sum().item(), 1)


@daifu.transform
def train(model, optimizer, criterion, data, held_out, ckpt_dir, seed, start, stop):
    x, tag_lists = data
    g = torch.Generator().manual_seed(seed)
    losses = []
    for step in range(start, stop):
        rows = torch.randint(0, len(tag_lists), (BATCH,), generator=g).tolist()
        targets = multi_hot([tag_lists[r] for r in rows], TAGS)
        loss = criterion(model(x[rows]), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % SAVE_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return {"steps": len(losses), "final_loss": sum(losses[-10:]) / 10, "f1": tag_f1(model, *held_out)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    data, held_out = photos(seed, 1500), photos(seed + 1, 400)
    model = nn.Sequential(nn.Linear(FEATURES, 48), nn.ReLU(), nn.Linear(48, TAGS))
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, nn.BCEWithLogitsLoss(), data, held_out, ckpt_dir, seed, start,
                 STEPS if until is None else until)
