"""Bag-of-words text classifier (EmbeddingBag) with hard-example mining.

To track each example's loss, the dataset's batches were extended to `(tokens, offsets,
labels, index)` and the training loop unpacks four values. The evaluation helper, used at the
end of each epoch and written earlier, still unpacks three: the first evaluation fails.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

VOCAB, CLASSES = 200, 4
ARGS = {"epochs": 4, "batch": 32, "lr": 0.05, "emb": 32}


class Reviews(Dataset):
    """Token-id documents; each class prefers its own band of the vocabulary."""

    def __init__(self, seed: int, n: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.docs, self.labels = [], []
        for _ in range(n):
            label = int(torch.randint(0, CLASSES, (1,), generator=gen))
            length = int(torch.randint(5, 25, (1,), generator=gen))
            topical = torch.randint(label * 50, label * 50 + 50, (length // 2,), generator=gen)
            filler = torch.randint(0, VOCAB, (length - length // 2,), generator=gen)
            self.docs.append(torch.cat([topical, filler]))
            self.labels.append(label)

    def __len__(self) -> int:
        return len(self.docs)

    def __getitem__(self, i):
        return self.docs[i], self.labels[i], i


def collate(items):
    tokens = torch.cat([d for d, _, _ in items])
    offsets = torch.tensor([0] + [len(d) for d, _, _ in items[:-1]]).cumsum(0)
    labels = torch.tensor([y for _, y, _ in items])
    index = torch.tensor([i for _, _, i in items])
    return tokens, offsets, labels, index


class BagClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(VOCAB, ARGS["emb"], mode="mean")
        self.out = nn.Linear(ARGS["emb"], CLASSES)

    def forward(self, tokens, offsets):
        return self.out(self.bag(tokens, offsets))


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader) -> float:
    correct = total = 0
    for tokens, offsets, labels in loader:
        correct += (model(tokens, offsets).argmax(1) == labels).sum().item()
        total += len(labels)
    return correct / total


@daifu.transform
def train(model, optimizer, train_loader, val_loader, hardness, ckpt_dir, start, stop):
    step = 0
    accs, losses = [], []
    for epoch in range(ARGS["epochs"]):
        for tokens, offsets, labels, index in train_loader:
            if start <= step < stop:
                per_example = F.cross_entropy(model(tokens, offsets), labels, reduction="none")
                hardness[index] = per_example.detach()
                loss = per_example.mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
            step += 1
        if step > stop:
            break
        accs.append(evaluate(model, val_loader))
        save_checkpoint(ckpt_dir, step, model, optimizer)
    return {"steps": len(losses), "val_acc": accs[-1] if accs else None, "evaluations": len(accs),
            "hard_examples": int((hardness > 1.0).sum())}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    train_set, val_set = Reviews(seed, 640), Reviews(seed + 1, 200)
    train_loader = DataLoader(train_set, batch_size=ARGS["batch"], shuffle=True, collate_fn=collate,
                              generator=torch.Generator().manual_seed(seed))
    val_loader = DataLoader(val_set, batch_size=100, collate_fn=collate)
    model = BagClassifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=ARGS["lr"], momentum=0.9)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "ckpt"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    hardness = torch.zeros(len(train_set))
    total = ARGS["epochs"] * len(train_loader)
    return train(model, optimizer, train_loader, val_loader, hardness, ckpt_dir, start,
                 total if until is None else until)
