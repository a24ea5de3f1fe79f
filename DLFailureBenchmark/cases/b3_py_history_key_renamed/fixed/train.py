"""Python error on a live object (bag-of-words text classifier): the metrics history was given new keys.

A refactor renamed the history's keys to `train_loss` / `val_accuracy`, as the plotting script
wants them; the validation hook in the training loop still appends to `history["val_acc"]`,
a KeyError at the first validation, after 30 steps.

Fixed: the hook appends to `history["val_accuracy"]`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

VOCAB, TOPICS, LENGTH = 400, 3, 24
BATCH, STEPS, VALIDATE_EVERY, SAVE_EVERY = 32, 120, 30, 25


def documents(seed, count):
    """Token ids drawn mostly from each topic's own slice of the vocabulary, plus common words."""
    g = torch.Generator().manual_seed(seed)
    topics = torch.randint(0, TOPICS, (count,), generator=g)
    own = topics[:, None] * 100 + torch.randint(0, 100, (count, LENGTH), generator=g)
    common = torch.randint(300, VOCAB, (count, LENGTH), generator=g)
    pick = torch.rand(count, LENGTH, generator=g) < 0.25
    return torch.where(pick, own, common), topics


class TopicModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(VOCAB, 32, mode="mean")
        self.classify = nn.Linear(32, TOPICS)

    def forward(self, tokens):
        return self.classify(self.bag(tokens))


def new_history():
    return {"train_loss": [], "val_accuracy": []}


@torch.no_grad()
def validate(model, tokens, topics):
    model.eval()
    accuracy = float((model(tokens).argmax(1) == topics).float().mean())
    model.train()
    return accuracy


@daifu.transform
def train(model, optimizer, corpus, validation, history, ckpt_dir, seed, start, stop):
    tokens, topics = corpus
    order = torch.randperm(len(topics), generator=torch.Generator().manual_seed(seed))
    for step in range(start, stop):
        index = order[(step * BATCH) % len(order):][:BATCH]
        loss = nn.functional.cross_entropy(model(tokens[index]), topics[index])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history["train_loss"].append(loss.item())
        if (step + 1) % VALIDATE_EVERY == 0:
            history["val_accuracy"].append(validate(model, *validation))
        if (step + 1) % SAVE_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    validations = sum(len(values) for key, values in history.items() if key.startswith("val"))
    return {"steps": len(history["train_loss"]), "final_loss": sum(history["train_loss"][-10:]) / 10,
            "accuracy": validate(model, *validation), "validations_logged": validations}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    corpus, validation = documents(seed, 1920), documents(seed + 1, 480)
    model = TopicModel()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, corpus, validation, new_history(), ckpt_dir, seed, start,
                 STEPS if until is None else until)
