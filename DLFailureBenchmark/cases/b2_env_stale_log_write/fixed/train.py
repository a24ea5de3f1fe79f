"""Classifier with a JSON-lines training log on the cluster's shared (NFS) file system.

Twelve classes of 32-dimensional samples, an MLP trained with Adam for 160 steps. Every 10 steps
the script appends a record (step, training loss, learning rate) to `logs/train.jsonl` on the
shared file system, which the team's dashboard reads.

Fixed: a log write that fails with a transient file-system error (the NFS server answered "stale
file handle" once) is tried again, a few times, before giving up.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark import faults
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts.common import retrying

CLASSES, DIM = 12, 32
STEPS, BATCH, LOG_EVERY, CKPT_EVERY = 160, 64, 10, 25


def samples(g, count):
    centres = torch.randn(CLASSES, DIM, generator=torch.Generator().manual_seed(121)) * 0.6
    y = torch.randint(0, CLASSES, (count,), generator=g)
    return centres[y] + torch.randn(count, DIM, generator=g), y


def append_record(path, record):
    with open(path, "a") as log:
        log.write(json.dumps(record) + "\n")


@daifu.transform
def train(model, optimizer, val, log_path, ckpt_dir, start, stop, seed):
    for step in range(start, stop):
        x, y = samples(torch.Generator().manual_seed(seed * 100_003 + step), BATCH)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (step + 1) % LOG_EVERY == 0:
            retrying(append_record, log_path, {"step": step + 1, "loss": round(loss.item(), 5), "lr": optimizer.param_groups[0]["lr"]},
                     errors=(OSError,))
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    with torch.no_grad():
        accuracy = (model(val[0]).argmax(1) == val[1]).float().mean().item()
    steps_logged = [json.loads(line)["step"] for line in log_path.read_text().splitlines()]
    return {"steps": stop - start, "accuracy": accuracy, "log_records": len(steps_logged),
            "log_records_distinct": len(set(steps_logged))}


def main(workdir, seed=0, resume=None, until=None):
    faults.flaky("builtins.open", fail_on={7}, error=faults.stale_handle, caller=__file__)  # the shared file system
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(DIM, 64), nn.ReLU(), nn.Linear(64, CLASSES))
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    log_path = Path(workdir) / "logs" / "train.jsonl"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    val = samples(torch.Generator().manual_seed(seed * 7 + 2), 600)
    return train(model, optimizer, val, log_path, ckpt_dir, start, STEPS if until is None else until, seed)
