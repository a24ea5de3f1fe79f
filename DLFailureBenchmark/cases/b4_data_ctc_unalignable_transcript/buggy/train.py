"""A small CTC recogniser (GRU over frame features) trained on synthetic "utterances".

Each symbol of a transcript is spoken as 3-5 frames of its own feature pattern. A few
utterances of the corpus carry a wrong, much longer transcript (a segmentation error in the
corpus: the text of several utterances glued together); no alignment of their frames to the
text exists, CTC gives them an infinite loss, the batch mean is inf, and the script's
finiteness check stops the run.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

SYMBOLS, BLANK, FEAT = 6, 0, 12
HPARAMS = {"batch": 16, "steps": 120, "lr": 3e-3, "hidden": 48, "ckpt_every": 40, "corpus": 800}
GLUED = {357, 611}  # utterances whose transcript was glued to the next ones


def utterance(gen: torch.Generator, patterns: torch.Tensor):
    n = int(torch.randint(2, 6, (1,), generator=gen))
    text = torch.randint(1, SYMBOLS + 1, (n,), generator=gen)
    frames = []
    for s in text.tolist():
        k = int(torch.randint(3, 6, (1,), generator=gen))
        frames.append(patterns[s].expand(k, FEAT) + 0.4 * torch.randn(k, FEAT, generator=gen))
    return torch.cat(frames), text


def build_corpus(seed: int, count: int, glued: set[int]):
    gen = torch.Generator().manual_seed(seed)
    patterns = torch.randn(SYMBOLS + 1, FEAT, generator=torch.Generator().manual_seed(1))
    corpus = [utterance(gen, patterns) for _ in range(count)]
    for i in glued:
        audio, _ = corpus[i]
        corpus[i] = (audio, torch.cat([corpus[(i + j) % count][1] for j in range(6)]))
    return corpus


def collate(items):
    audio = nn.utils.rnn.pad_sequence([a for a, _ in items], batch_first=True)
    audio_lens = torch.tensor([a.size(0) for a, _ in items])
    targets = torch.cat([t for _, t in items])
    target_lens = torch.tensor([t.numel() for _, t in items])
    return audio, audio_lens, targets, target_lens


class Recogniser(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.inp = nn.Linear(FEAT, hidden)
        self.rnn = nn.GRU(hidden, hidden, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * hidden, SYMBOLS + 1)

    def forward(self, audio):
        h, _ = self.rnn(torch.relu(self.inp(audio)))
        return self.out(h).log_softmax(-1)  # (B, T, C)


def edit_distance(a: list[int], b: list[int]) -> int:
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


@torch.no_grad()
def symbol_error_rate(model: Recogniser, items) -> float:
    audio, lens, targets, target_lens = collate(items)
    best = model(audio).argmax(-1)
    errors = total = offset = 0
    for b in range(len(items)):
        path = best[b, :lens[b]].tolist()
        hyp = [p for k, p in enumerate(path) if p != BLANK and (k == 0 or p != path[k - 1])]
        ref = targets[offset:offset + target_lens[b]].tolist()
        offset += int(target_lens[b])
        errors += edit_distance(hyp, ref)
        total += len(ref)
    return errors / total


@daifu.transform
def train(model, optimizer, corpus, held_out, ckpt_dir, start, stop, seed):
    order = torch.randperm(len(corpus), generator=torch.Generator().manual_seed(seed)).tolist()
    per_epoch = len(corpus) // HPARAMS["batch"]
    losses = []
    for step in range(start, stop):
        k = step % per_epoch
        batch = [corpus[i] for i in order[k * HPARAMS["batch"]:(k + 1) * HPARAMS["batch"]]]
        audio, audio_lens, targets, target_lens = collate(batch)
        log_probs = model(audio).transpose(0, 1)  # (T, B, C) for CTC
        loss = F.ctc_loss(log_probs, targets, audio_lens, target_lens, blank=BLANK, reduction="mean")
        if not math.isfinite(loss.item()):
            raise FloatingPointError(f"non-finite CTC loss {loss.item()} at step {step}")
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % HPARAMS["ckpt_every"] == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return {"steps": len(losses), "ser": symbol_error_rate(model, held_out),
            "train_loss": sum(losses[-10:]) / max(len(losses[-10:]), 1)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    corpus = build_corpus(seed, HPARAMS["corpus"], GLUED)
    held_out = build_corpus(seed + 1, 120, set())
    model = Recogniser(HPARAMS["hidden"])
    optimizer = torch.optim.Adam(model.parameters(), lr=HPARAMS["lr"])
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "ckpt"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, corpus, held_out, ckpt_dir, start, HPARAMS["steps"] if until is None else until,
                 seed)
