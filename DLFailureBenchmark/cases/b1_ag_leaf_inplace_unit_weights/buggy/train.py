"""Cosine-softmax classifier with class weights kept on the unit sphere (blind1).

A NormFace-style classifier: the logits are a scaled cosine between the normalised features and
the class weight vectors. Every 20 steps the script projects the class weights back onto the
unit sphere, so that every class is scored on the same scale.

Reported: https://github.com/pytorch/examples/pull/779
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import tabular

STEPS, BATCH, CKPT_EVERY = 120, 32, 20
PROJECT_EVERY, SCALE = 20, 10.0


class CosineNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(tabular.FEATURES, 32), nn.ReLU(), nn.Linear(32, 32))
        self.classes = nn.Linear(32, tabular.CLASSES, bias=False)

    def forward(self, x):
        return SCALE * self.classes(F.normalize(self.trunk(x), dim=1))


@daifu.transform
def train(model, optimizer, ckpt_dir, start, stop, seed):
    losses, projections = [], 0
    for step in range(start, stop):
        x, y = tabular.batch(seed, step, BATCH)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % PROJECT_EVERY == 0:
            w = model.classes.weight
            w.div_(w.norm(dim=1, keepdim=True))
            projections += 1
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return losses, projections


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = CosineNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    losses, projections = train(model, optimizer, ckpt_dir, start, STEPS if until is None else until, seed)
    norms = model.classes.weight.detach().norm(dim=1)
    return {"steps": len(losses), "final_loss": sum(losses[-20:]) / len(losses[-20:]),
            "accuracy": tabular.accuracy(model, *tabular.held_out(seed)), "projections": projections,
            "min_class_norm": float(norms.min()), "max_class_norm": float(norms.max())}
