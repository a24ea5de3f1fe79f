"""Learning to rank with a pairwise (RankNet) loss over query groups, MSLR-style data.

Each step takes 4 queries; for every query the loss averages log(1 + exp(-(s_i - s_j))) over
the document pairs whose relevance differs. Query 95 has only non-relevant documents (grade 0
everywhere, common in web-search logs): it has no pairs, and stacking its empty list of pair
losses fails.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

N_FEATURES, DOCS_PER_QUERY, QUERIES_PER_STEP = 10, 12, 4
EPOCHS, N_QUERIES, LR = 2, 120, 3e-3
ALL_ZERO = {95}


def make_queries(seed: int, count: int, all_zero: set[int]):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(N_FEATURES, generator=torch.Generator().manual_seed(7))
    queries = []
    for q in range(count):
        feats = torch.randn(DOCS_PER_QUERY, N_FEATURES, generator=gen)
        utility = feats @ w + 0.5 * torch.randn(DOCS_PER_QUERY, generator=gen)
        grades = torch.bucketize(utility, torch.tensor([0.5, 2.0]))  # 0, 1 or 2
        if q in all_zero:
            grades = torch.zeros_like(grades)
        queries.append((feats, grades))
    return queries


class Scorer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(N_FEATURES, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, feats):
        return self.net(feats).squeeze(-1)


def pairwise_loss(scores: torch.Tensor, grades: torch.Tensor) -> torch.Tensor:
    terms = []
    for i in range(len(grades)):
        for j in range(len(grades)):
            if grades[i] > grades[j]:
                terms.append(F.softplus(-(scores[i] - scores[j])))
    return torch.stack(terms).mean()


@torch.no_grad()
def ndcg_at(model: Scorer, queries, k: int = 5) -> float:
    values = []
    for feats, grades in queries:
        gains = (2.0 ** grades.float() - 1)
        ideal = gains.sort(descending=True).values[:k]
        ranked = gains[model(feats).argsort(descending=True)][:k]
        discounts = 1 / torch.log2(torch.arange(2, k + 2).float())
        best = (ideal * discounts).sum().item()
        if best > 0:
            values.append((ranked * discounts).sum().item() / best)
    return sum(values) / len(values)


@daifu.transform
def train(model, optimizer, queries, test_queries, ckpt_dir, start, stop, seed):
    gen = torch.Generator().manual_seed(seed)
    order = [i for _ in range(EPOCHS) for i in torch.randperm(len(queries), generator=gen).tolist()]
    losses = []
    for step in range(start, stop):
        group = [queries[i] for i in order[step * QUERIES_PER_STEP:(step + 1) * QUERIES_PER_STEP]]
        per_query = [pairwise_loss(model(feats), grades) for feats, grades in group]
        loss = torch.stack(per_query).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % 20 == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return {"steps": len(losses), "ndcg5": ndcg_at(model, test_queries),
            "train_loss": sum(losses[-10:]) / max(len(losses[-10:]), 1)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    queries = make_queries(seed, N_QUERIES, ALL_ZERO)
    test_queries = make_queries(seed + 1, 60, set())
    model = Scorer()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "ckpt"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    total = EPOCHS * N_QUERIES // QUERIES_PER_STEP
    return train(model, optimizer, queries, test_queries, ckpt_dir, start, total if until is None else until, seed)
