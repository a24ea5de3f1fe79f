"""Pre-train an encoder on fine topics, then fit a linear probe for coarse topics on its features.

Steps 0-59 train an MLP encoder and a ten-way head on fine-grained topics (Adam). From step 60 the
encoder is kept as it is and a linear probe learns three coarse topics from its features with
plain SGD; the probe set (600 documents) is embedded once, when the probe starts, to save the
encoder's forward pass at every step. Scored: the probe's accuracy on 1000 held-out documents.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

TOPICS, COARSE, DIM = 10, 3, 32
STEPS, BATCH, CKPT_EVERY = 140, 48, 20
PROBE_FROM, PROBE_SET = 60, 600


def documents(g, count):
    centres = torch.randn(TOPICS, DIM, generator=torch.Generator().manual_seed(5)) * 0.7
    fine = torch.randint(0, TOPICS, (count,), generator=g)
    return centres[fine] + torch.randn(count, DIM, generator=g), fine


def coarse(fine):
    return torch.div(fine, 4, rounding_mode="floor")


@daifu.transform
def train(model, optimizer, probe_set, test, ckpt_dir, start, stop, seed):
    encoder, head, probe = model["encoder"], model["head"], model["probe"]
    probe_optimizer = torch.optim.SGD(probe.parameters(), lr=0.3)
    x_probe, y_probe = probe_set
    features = None
    for step in range(start, stop):
        g = torch.Generator().manual_seed(seed * 100_003 + step)
        if step < PROBE_FROM:
            x, y = documents(g, BATCH)
            loss = F.cross_entropy(head(encoder(x)), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        else:
            if features is None:
                features = encoder(x_probe)
            idx = torch.randint(0, len(y_probe), (BATCH,), generator=g)
            loss = F.cross_entropy(probe(features[idx]), y_probe[idx])
            probe_optimizer.zero_grad()
            loss.backward()
            probe_optimizer.step()
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    with torch.no_grad():
        probe_accuracy = (probe(encoder(test[0])).argmax(1) == test[1]).float().mean().item()
    return {"steps": stop - start, "probe_accuracy": probe_accuracy}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = nn.ModuleDict({"encoder": nn.Sequential(nn.Linear(DIM, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU()),
                           "head": nn.Linear(32, TOPICS), "probe": nn.Linear(32, COARSE)})
    optimizer = torch.optim.Adam([*model["encoder"].parameters(), *model["head"].parameters()], lr=3e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    x_probe, fine = documents(torch.Generator().manual_seed(seed * 7 + 1), PROBE_SET)
    x_test, fine_test = documents(torch.Generator().manual_seed(seed * 7 + 2), 1000)
    return train(model, optimizer, (x_probe, coarse(fine)), (x_test, coarse(fine_test)), ckpt_dir, start,
                 STEPS if until is None else until, seed)
