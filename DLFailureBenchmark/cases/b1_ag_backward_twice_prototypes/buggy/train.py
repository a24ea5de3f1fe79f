"""Classifier with learned class prototypes from step 40 (blind1).

A five-class MLP. From step 40 the features of each row are also pulled towards a prototype of
its class; the prototypes are a learned projection of the class anchors (one reference row per
class), so the projection and the classifier are trained together.

Reported: https://github.com/lucidrains/denoising-diffusion-pytorch/issues/109
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
STAGE2, ALIGN, WIDTH = 40, 0.1, 16


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(tabular.FEATURES, 32), nn.ReLU(), nn.Linear(32, WIDTH))
        self.head = nn.Linear(WIDTH, tabular.CLASSES)
        self.proto = nn.Linear(tabular.FEATURES, WIDTH)


@daifu.transform
def train(model, optimizer, anchors, ckpt_dir, start, stop, seed):
    losses, aligned = [], 0
    for step in range(start, stop):
        x, y = tabular.batch(seed, step, BATCH)
        feats = model.trunk(x)
        loss = F.cross_entropy(model.head(F.relu(feats)), y)
        if step == STAGE2:
            prototypes = model.proto(anchors)
        if step >= STAGE2:
            loss = loss + ALIGN * ((feats - prototypes[y]) ** 2).sum(1).mean()
            aligned += 1
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return losses, aligned


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    proto_before = model.proto.weight.detach().clone()
    losses, aligned = train(model, optimizer, tabular.centres(), ckpt_dir, start, STEPS if until is None else until,
                            seed)
    x, y = tabular.held_out(seed)
    with torch.no_grad():
        accuracy = float((model.head(F.relu(model.trunk(x))).argmax(1) == y).float().mean())
    return {"steps": len(losses), "final_loss": sum(losses[-20:]) / len(losses[-20:]), "accuracy": accuracy,
            "aligned_steps": aligned, "proto_moved": float((model.proto.weight.detach() - proto_before).norm())}
