"""Sequence classification with a small Transformer encoder (batch_first) and a length curriculum.

The first 30 steps train on sequences of one length (no padding, no mask). After that the
batches mix lengths and the loop builds a key-padding mask from the lengths, but in
sequence-first layout, (T, B), the layout of the older non-batch_first code it grew out of;
the encoder wants (B, T) and refuses it.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

CFG = {"vocab": 12, "pad": 0, "dim": 32, "heads": 4, "layers": 2, "batch": 20, "min_len": 6, "max_len": 14,
       "fixed_len": 10, "curriculum_steps": 30, "steps": 100, "lr": 2e-3, "ckpt_every": 25}


def sample_batch(gen: torch.Generator, batch: int, lengths: torch.Tensor):
    """Label 1 when token 1 occurs more often than token 2 in the (unpadded) sequence."""
    width = int(lengths.max())
    tokens = torch.randint(1, CFG["vocab"], (batch, width), generator=gen)
    positions = torch.arange(width).unsqueeze(0)
    tokens[positions >= lengths.unsqueeze(1)] = CFG["pad"]
    labels = ((tokens == 1).sum(1) > (tokens == 2).sum(1)).long()
    return tokens, labels


def batch_lengths(gen: torch.Generator, step: int) -> torch.Tensor:
    if step < CFG["curriculum_steps"]:
        return torch.full((CFG["batch"],), CFG["fixed_len"])
    return torch.randint(CFG["min_len"], CFG["max_len"] + 1, (CFG["batch"],), generator=gen)


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(CFG["vocab"], CFG["dim"], padding_idx=CFG["pad"])
        self.pos = nn.Parameter(torch.zeros(1, CFG["max_len"], CFG["dim"]))
        layer = nn.TransformerEncoderLayer(CFG["dim"], CFG["heads"], 64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, CFG["layers"], enable_nested_tensor=False)
        self.head = nn.Linear(CFG["dim"], 2)

    def forward(self, tokens, pad_mask=None):
        x = self.embed(tokens) + self.pos[:, :tokens.size(1)]
        h = self.encoder(x, src_key_padding_mask=pad_mask)
        keep = (tokens != CFG["pad"]).unsqueeze(-1).float()
        return self.head((h * keep).sum(1) / keep.sum(1))


@torch.no_grad()
def evaluate(model: Classifier, seed: int) -> float:
    gen = torch.Generator().manual_seed(seed + 999)
    correct = total = 0
    for _ in range(10):
        lengths = torch.randint(CFG["min_len"], CFG["max_len"] + 1, (CFG["batch"],), generator=gen)
        tokens, labels = sample_batch(gen, CFG["batch"], lengths)
        mask = tokens == CFG["pad"]
        correct += (model(tokens, mask).argmax(1) == labels).sum().item()
        total += labels.numel()
    return correct / total


@daifu.transform
def train(model, optimizer, ckpt_dir, start, stop, seed):
    gen = torch.Generator().manual_seed(seed)
    losses, padded_steps = [], 0
    for step in range(start, stop):
        lengths = batch_lengths(gen, step)
        tokens, labels = sample_batch(gen, CFG["batch"], lengths)
        pad_mask = None
        if lengths.min() < tokens.size(1):
            pad_mask = torch.arange(tokens.size(1)).unsqueeze(1) >= lengths.unsqueeze(0)
            padded_steps += 1
        logits = model(tokens, pad_mask)
        loss = F.cross_entropy(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % CFG["ckpt_every"] == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return {"steps": len(losses), "padded_steps": padded_steps, "accuracy": evaluate(model, seed),
            "train_loss": sum(losses[-10:]) / max(len(losses[-10:]), 1)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = Classifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=CFG["lr"])
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "ckpt"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, ckpt_dir, start, CFG["steps"] if until is None else until, seed)
