"""Bag-of-embeddings text classifier over tokenised documents (blind1).

Documents are token ids (vocabulary of 60, 0 is padding), 8 to 24 tokens long, in three topics.
Each step takes 32 documents, pads them to the model's maximum length with `collate`, and trains
a mean-of-embeddings classifier.

Reported: https://github.com/Yuanhy1997/GenBioEL/issues/3
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

STEPS, BATCH, CKPT_EVERY = 120, 32, 20
VOCAB, TOPICS, MAX_LEN, PAD = 60, 3, 24, 0


def documents(seed, step, size=BATCH):
    """`size` (token ids, topic) pairs; one document of step 70 came from a source with longer texts."""
    g = torch.Generator().manual_seed(seed * 10_007 + step)
    docs = []
    for _ in range(size):
        topic = int(torch.randint(0, TOPICS, (1,), generator=g))
        length = int(torch.randint(8, MAX_LEN + 1, (1,), generator=g))
        own = 1 + topic * 15 + torch.randint(0, 15, (length,), generator=g)
        shared = torch.randint(46, VOCAB, (length,), generator=g)
        docs.append((torch.where(torch.rand(length, generator=g) < 0.4, own, shared), topic))
    if step == 70:
        docs[5] = (torch.cat([docs[5][0]] * 4)[:31], docs[5][1])
    return docs


def collate(samples):
    """Token ids padded to MAX_LEN, stacked into a (batch, MAX_LEN) tensor, and the topics."""
    padded = []
    for ids, _ in samples:
        if len(ids) < MAX_LEN:
            ids = torch.cat([ids, ids.new_full((MAX_LEN - len(ids),), PAD)])
        padded.append(ids)
    return torch.stack(padded), torch.tensor([topic for _, topic in samples])


class BagClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16, padding_idx=PAD)
        self.out = nn.Linear(16, TOPICS)

    def forward(self, ids):
        mask = (ids != PAD).float().unsqueeze(2)
        return self.out((self.embed(ids) * mask).sum(1) / mask.sum(1).clamp_min(1.0))


@daifu.transform
def train(model, optimizer, ckpt_dir, start, stop, seed):
    losses, docs_trained = [], 0
    for step in range(start, stop):
        ids, topics = collate(documents(seed, step))
        loss = F.cross_entropy(model(ids), topics)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        docs_trained += len(topics)
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return losses, docs_trained


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = BagClassifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    losses, docs_trained = train(model, optimizer, ckpt_dir, start, STEPS if until is None else until, seed)
    ids, topics = collate(documents(seed + 1, 10**6, size=600))
    with torch.no_grad():
        accuracy = float((model(ids).argmax(1) == topics).float().mean())
    return {"steps": len(losses), "final_loss": sum(losses[-20:]) / len(losses[-20:]), "accuracy": accuracy,
            "docs_trained": docs_trained}
