"""Matrix-factorisation recommender trained with BPR and sampled negatives (blind1).

Users and items have 8-dimensional embeddings; a user's score for an item is their dot product.
Each step takes 64 (user, liked item) pairs and one sampled negative item per pair, and
minimises the BPR loss. From step 50 negatives are sampled with a popularity skew (popular items,
low ids, more often), which makes them harder.

Reported: https://github.com/pytorch/pytorch/issues/116598

Fixed: the skewed negatives are item ids, so they are made integers (`.long()`); `floor()` keeps
the float dtype, and an embedding lookup takes only integer indices.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

STEPS, BATCH, CKPT_EVERY = 120, 64, 20
USERS, ITEMS, TASTES, DIM, SKEW_FROM = 60, 100, 5, 8, 50


class MF(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.users = nn.Embedding(USERS, DIM)
        self.items = nn.Embedding(ITEMS, DIM)
        nn.init.normal_(self.users.weight, std=0.1)
        nn.init.normal_(self.items.weight, std=0.1)


def liked_pairs(g, size):
    """Users and items they liked: a user likes items of their taste (id modulo TASTES)."""
    users = torch.randint(0, USERS, (size,), generator=g)
    items = (torch.randint(0, ITEMS // TASTES, (size,), generator=g) * TASTES + users % TASTES)
    return users, items


@daifu.transform
def train(model, optimizer, ckpt_dir, start, stop, seed):
    losses = []
    for step in range(start, stop):
        g = torch.Generator().manual_seed(seed * 7919 + step)
        users, pos = liked_pairs(g, BATCH)
        if step < SKEW_FROM:
            neg = torch.randint(0, ITEMS, (BATCH,), generator=g)
        else:
            neg = (torch.rand(BATCH, generator=g) ** 2 * ITEMS).long()
        u = model.users(users)
        margin = (u * model.items(pos)).sum(1) - (u * model.items(neg)).sum(1)
        loss = -F.logsigmoid(margin).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return losses


@torch.no_grad()
def ranking_auc(model):
    """How often a user scores an item of their taste above an item of another taste."""
    scores = model.users.weight @ model.items.weight.T
    liked = (torch.arange(USERS).unsqueeze(1) % TASTES) == (torch.arange(ITEMS).unsqueeze(0) % TASTES)
    wins = [(scores[u][liked[u]].unsqueeze(1) > scores[u][~liked[u]].unsqueeze(0)).float().mean() for u in range(USERS)]
    return float(torch.stack(wins).mean())


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = MF()
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    losses = train(model, optimizer, ckpt_dir, start, STEPS if until is None else until, seed)
    return {"steps": len(losses), "final_loss": sum(losses[-20:]) / len(losses[-20:]),
            "ranking_auc": ranking_auc(model)}
