"""Graph classification with a two-layer message-passing network written in plain PyTorch.

The graphs come from two exports: most edge lists number nodes from 0, but the graphs of the
second export (here one graph, #37) number them from 1, as the tool that wrote them does. Its
largest node id equals its node count, and gathering the messages `h[src]` goes out of range.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

N_GRAPHS, EPOCHS, HIDDEN, LR = 48, 2, 32, 1e-2
ONE_BASED = {37}


def ring_graph(gen: torch.Generator, n: int) -> list[tuple[int, int]]:
    edges = [(i, (i + 1) % n) for i in range(n)]
    for _ in range(2):
        a, b = torch.randint(0, n, (2,), generator=gen).tolist()
        if a != b:
            edges.append((a, b))
    return edges


def star_graph(gen: torch.Generator, n: int) -> list[tuple[int, int]]:
    hubs = [0, 1]
    edges = [(hubs[i % 2], i) for i in range(2, n)]
    edges.append((0, 1))
    return edges


class GraphSet:
    """Graphs as (node features, edge_index (2, E) both directions, label), read from the raw edge lists."""

    def __init__(self, seed: int, count: int, one_based: set[int]) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.features, self.edges, self.labels = [], [], []
        for i in range(count):
            n = int(torch.randint(8, 16, (1,), generator=gen))
            label = i % 2
            pairs = star_graph(gen, n) if label else ring_graph(gen, n)
            raw = torch.tensor(pairs).t()
            if i in one_based:
                raw = raw + 1  # how this export writes its node ids
            self.edges.append(self.undirected(raw))
            self.features.append(torch.ones(n, 1))
            self.labels.append(torch.tensor(label))

    @staticmethod
    def undirected(edge_index: torch.Tensor) -> torch.Tensor:
        return torch.cat([edge_index, edge_index.flip(0)], dim=1)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i):
        return self.features[i], self.edges[i], self.labels[i]


class MessagePassing(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.self_lin, self.msg_lin = nn.Linear(cin, cout), nn.Linear(cin, cout)

    def forward(self, h, edge_index):
        src, dst = edge_index
        messages = self.msg_lin(h)[src]
        agg = torch.zeros(h.size(0), messages.size(1)).index_add_(0, dst, messages)
        degree = torch.zeros(h.size(0)).index_add_(0, dst, torch.ones(dst.numel())).clamp(min=1)
        return torch.relu(self.self_lin(h) + agg / degree.unsqueeze(1) + 0.1 * agg)


class GraphClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mp1, self.mp2 = MessagePassing(1, HIDDEN), MessagePassing(HIDDEN, HIDDEN)
        self.readout = nn.Linear(2 * HIDDEN, 2)

    def forward(self, x, edge_index):
        h = self.mp2(self.mp1(x, edge_index), edge_index)
        return self.readout(torch.cat([h.mean(0), h.max(0).values]))


@torch.no_grad()
def accuracy(model: GraphClassifier, graphs: GraphSet) -> float:
    hits = sum(int(model(x, e).argmax() == y) for x, e, y in (graphs[i] for i in range(len(graphs))))
    return hits / len(graphs)


@daifu.transform
def train(model, optimizer, dataset, test_set, ckpt_dir, start, stop, seed):
    order_gen = torch.Generator().manual_seed(seed)
    orders = [torch.randperm(len(dataset), generator=order_gen).tolist() for _ in range(EPOCHS)]
    schedule = [i for order in orders for i in order]
    trained = 0
    losses = []
    for step in range(start, stop):
        x, edge_index, y = dataset[schedule[step]]
        logits = model(x, edge_index)
        loss = nn.functional.cross_entropy(logits.unsqueeze(0), y.unsqueeze(0))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        trained += 1
        losses.append(loss.item())
        if (step + 1) % N_GRAPHS == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    valid = sum(int(e.min() == 0 and e.max() < x.size(0)) for x, e, _ in (dataset[i] for i in range(len(dataset))))
    return {"steps": len(losses), "graphs_trained": trained, "test_acc": accuracy(model, test_set),
            "stored_graphs_valid": valid,
            "train_loss": sum(losses[-N_GRAPHS:]) / max(len(losses[-N_GRAPHS:]), 1)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    dataset = GraphSet(seed, N_GRAPHS, ONE_BASED)
    test_set = GraphSet(seed + 1, 40, set())
    model = GraphClassifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "ckpt"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, dataset, test_set, ckpt_dir, start, N_GRAPHS * EPOCHS if until is None else until,
                 seed)
