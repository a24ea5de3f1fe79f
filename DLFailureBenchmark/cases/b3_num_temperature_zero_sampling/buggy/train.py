"""Numerics (character bigram language model): sampling with temperature 0 divides the logits by zero.

Every 60 steps the script prints a sample. The config asks for `temperature: 0.0`, meaning
"greedy"; `sample` divides the logits by the temperature, softmax of +-inf gives NaN, and
`torch.multinomial` rejects the probabilities at the first sample.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

TEXT = ("the cat sat on the mat. the dog sat on the log. a cat and a dog met on the mat. " * 20)
VOCAB = sorted(set(TEXT))
STOI = {c: i for i, c in enumerate(VOCAB)}
GEN = {"steps": 240, "batch": 128, "lr": 0.1, "sample_every": 60, "sample_length": 30, "temperature": 0.0,
       "save_every": 60}


class Bigram(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = nn.Embedding(len(VOCAB), len(VOCAB))

    def forward(self, ids):
        return self.table(ids)


def sample(model, first, length, temperature, g):
    ids = [STOI[first]]
    with torch.no_grad():
        for _ in range(length):
            logits = model(torch.tensor([ids[-1]]))[0]
            probs = F.softmax(logits / temperature, dim=-1)
            ids.append(int(torch.multinomial(probs, 1, generator=g)))
    return "".join(VOCAB[i] for i in ids)


def valid_bigrams(text):
    pairs = {TEXT[i:i + 2] for i in range(len(TEXT) - 1)}
    return sum(text[i:i + 2] in pairs for i in range(len(text) - 1)) / max(len(text) - 1, 1)


@daifu.transform
def train(model, optimizer, data, ckpt_dir, seed, start, stop):
    g = torch.Generator().manual_seed(seed)
    samples, losses = [], []
    for step in range(start, stop):
        pos = torch.randint(0, len(data) - 1, (GEN["batch"],), generator=g)
        loss = F.cross_entropy(model(data[pos]), data[pos + 1])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % GEN["sample_every"] == 0:
            samples.append(sample(model, "t", GEN["sample_length"], GEN["temperature"], g))
            print(f"step {step + 1}: {samples[-1]!r}")
        if (step + 1) % GEN["save_every"] == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return {"steps": len(losses), "final_loss": sum(losses[-10:]) / 10, "samples": len(samples),
            "sample_validity": valid_bigrams(samples[-1]) if samples else 0.0}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    data = torch.tensor([STOI[c] for c in TEXT])
    model = Bigram()
    optimizer = torch.optim.Adam(model.parameters(), lr=GEN["lr"])
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, data, ckpt_dir, seed, start, GEN["steps"] if until is None else until)
