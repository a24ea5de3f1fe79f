"""GRU sentiment classifier over a word vocabulary built from the training texts.

Word ids start at 1 because 0 is the padding id, so the largest id equals the vocabulary
size; the embedding table was sized `len(vocab)`, one row short. Words are numbered by
frequency, and the rarest word, whose id is the one past the table, first turns up in the
batch of step 19: the embedding lookup goes out of range.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

PAD = 0
HP = {"emb": 24, "hidden": 32, "batch": 32, "epochs": 3, "lr": 5e-3}
POSITIVE = ["great", "good", "lovely", "fine", "superb", "nice"]
NEGATIVE = ["bad", "awful", "poor", "boring", "weak", "dull"]
NEUTRAL = ["the", "a", "film", "plot", "actor", "scene", "music", "story", "it", "was", "and", "very"]


def reviews(seed: int, n: int):
    gen = torch.Generator().manual_seed(seed)
    texts, labels = [], []
    for _ in range(n):
        label = int(torch.randint(0, 2, (1,), generator=gen))
        polar = POSITIVE if label else NEGATIVE
        length = int(torch.randint(4, 10, (1,), generator=gen))
        words = []
        for _ in range(length):
            pool = polar if torch.rand(1, generator=gen).item() < 0.35 else NEUTRAL
            words.append(pool[int(torch.randint(0, len(pool), (1,), generator=gen))])
        if len(texts) == 137:
            words.append("masterpiece")  # the only review with this word
        texts.append(words)
        labels.append(label)
    return texts, labels


def build_vocab(texts) -> dict[str, int]:
    counts = Counter(w for t in texts for w in t)
    return {w: i + 1 for i, (w, _) in enumerate(counts.most_common())}  # 0 is PAD


def encode(texts, vocab):
    width = max(len(t) for t in texts)
    ids = torch.full((len(texts), width), PAD)
    for r, t in enumerate(texts):
        ids[r, :len(t)] = torch.tensor([vocab[w] for w in t])
    return ids


class Sentiment(nn.Module):
    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, HP["emb"], padding_idx=PAD)
        self.gru = nn.GRU(HP["emb"], HP["hidden"], batch_first=True)
        self.out = nn.Linear(HP["hidden"], 2)

    def forward(self, ids):
        lengths = (ids != PAD).sum(1)
        packed = nn.utils.rnn.pack_padded_sequence(self.embed(ids), lengths, batch_first=True, enforce_sorted=False)
        _, h = self.gru(packed)
        return self.out(h[-1])


@daifu.transform
def train(model, optimizer, data, vocab, val, ckpt_dir, start, stop, seed):
    texts, labels = data
    gen = torch.Generator().manual_seed(seed)
    per_epoch = len(texts) // HP["batch"]
    order = [i for _ in range(HP["epochs"]) for i in torch.randperm(len(texts), generator=gen).tolist()]
    losses = []
    for step in range(start, stop):
        idx = order[step * HP["batch"]:(step + 1) * HP["batch"]]
        ids = encode([texts[i] for i in idx], vocab)
        logits = model(ids)
        loss = F.cross_entropy(logits, torch.tensor([labels[i] for i in idx]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % per_epoch == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    with torch.no_grad():
        pred = model(encode(val[0], vocab)).argmax(1)
    return {"steps": len(losses), "val_acc": (pred == torch.tensor(val[1])).float().mean().item()}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    texts, labels = reviews(seed, 640)
    vocab = build_vocab(texts)
    val_texts, val_labels = reviews(seed + 1, 300)
    val_texts = [[w for w in t if w in vocab] for t in val_texts]
    model = Sentiment(len(vocab))
    optimizer = torch.optim.Adam(model.parameters(), lr=HP["lr"])
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "ckpt"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    total = HP["epochs"] * (len(texts) // HP["batch"])
    return train(model, optimizer, (texts, labels), vocab, (val_texts, val_labels), ckpt_dir, start,
                 total if until is None else until, seed)
