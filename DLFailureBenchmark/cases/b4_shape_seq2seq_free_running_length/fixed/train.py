"""GRU encoder-decoder learning to reverse digit strings, with scheduled sampling.

Targets are `[BOS, d1, ..., dn]`; the loss compares the decoder's outputs with `tgt[:, 1:]`.
With teacher forcing the decoder reads `tgt[:, :-1]` and makes n outputs. Once the schedule
starts letting the decoder run on its own predictions (after step 40), `Seq2Seq.decode` loops
`tgt.size(1)` times, one output too many, and the loss cannot pair outputs with targets.

Fixed: the decoder makes `tgt.size(1) - 1` outputs in both modes.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

DIGITS, BOS = 10, 10
SEQ_LEN = 5
CFG = {"steps": 160, "batch": 48, "lr": 5e-3, "tf_full_until": 40, "tf_floor": 0.5, "ckpt_every": 40}


def make_pairs(gen: torch.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    src = torch.randint(0, DIGITS, (n, SEQ_LEN), generator=gen)
    tgt = torch.cat([torch.full((n, 1), BOS), src.flip(1)], dim=1)
    return src, tgt


class Seq2Seq(nn.Module):
    def __init__(self, hidden: int = 96) -> None:
        super().__init__()
        self.src_emb = nn.Embedding(DIGITS, 32)
        self.tgt_emb = nn.Embedding(DIGITS + 1, 32)
        self.encoder = nn.GRU(32, hidden, batch_first=True)
        self.decoder = nn.GRUCell(32, hidden)
        self.out = nn.Linear(hidden, DIGITS)

    def encode(self, src):
        _, h = self.encoder(self.src_emb(src))
        return h[0]

    def decode(self, h, tgt, teacher: bool):
        """Logits for each target position after BOS: fed the true previous token, or its own guess."""
        outputs = []
        token = tgt[:, 0]
        steps = tgt.size(1) - 1
        for t in range(steps):
            h = self.decoder(self.tgt_emb(token), h)
            logits = self.out(h)
            outputs.append(logits)
            token = tgt[:, t + 1] if teacher else logits.argmax(-1)
        return torch.stack(outputs, dim=1)

    def forward(self, src, tgt, teacher=True):
        return self.decode(self.encode(src), tgt, teacher)


def compute_loss(model: Seq2Seq, src, tgt, teacher: bool) -> torch.Tensor:
    logits = model(src, tgt, teacher)
    return F.cross_entropy(logits.reshape(-1, DIGITS), tgt[:, 1:].reshape(-1))


def teacher_ratio(step: int) -> float:
    if step < CFG["tf_full_until"]:
        return 1.0
    return max(CFG["tf_floor"], 1.0 - (step - CFG["tf_full_until"]) / CFG["steps"])


@torch.no_grad()
def token_accuracy(model: Seq2Seq, src, tgt) -> float:
    model.eval()
    pred = model(src, tgt, teacher=False).argmax(-1)
    model.train()
    return (pred == tgt[:, 1:]).float().mean().item()


@daifu.transform
def train(model, optimizer, held_out, ckpt_dir, start, stop, seed):
    data_gen = torch.Generator().manual_seed(seed)
    coin = random.Random(seed)
    losses, free_running = [], 0
    for step in range(start, stop):
        src, tgt = make_pairs(data_gen, CFG["batch"])
        teacher = coin.random() < teacher_ratio(step)
        loss = compute_loss(model, src, tgt, teacher)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        free_running += not teacher
        if (step + 1) % CFG["ckpt_every"] == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return {"steps": len(losses), "free_running_steps": free_running, "token_acc": token_accuracy(model, *held_out)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = Seq2Seq()
    optimizer = torch.optim.Adam(model.parameters(), lr=CFG["lr"])
    start = load_checkpoint(resume, model, optimizer)
    held_out = make_pairs(torch.Generator().manual_seed(seed + 777), 500)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, held_out, ckpt_dir, start, CFG["steps"] if until is None else until, seed)
