"""Classifier saved after every epoch, the last three epochs averaged at the end (blind1).

A five-class MLP trained for five epochs of 24 steps. The weights of every epoch are saved to the
shared file system (`epoch_<N>.pt`); at the end the script averages the weights of the last three
epochs, a cheap ensemble, and evaluates the average.

Reported: https://github.com/rwth-i6/returnn/issues/1829

Fixed: the epoch's save is retried (`retrying(torch.save, ...)`): one write of the shared file
system failed and the same write a moment later succeeds.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark import faults
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import tabular
from DLFailureBenchmark.hosts.common import retrying

EPOCHS, STEPS_PER_EPOCH, BATCH, CKPT_EVERY, AVERAGE = 5, 24, 32, 24, 3


def stream_writer_failed():
    """What `torch.save` raises when the shared file system drops a write."""
    return RuntimeError("[enforce fail at inline_container.cc:778] . PytorchStreamWriter failed writing file "
                        "data/3: file write failed")


@daifu.transform
def train(model, optimizer, ckpt_dir, start, stop, seed):
    losses = []
    for epoch in range(start // STEPS_PER_EPOCH, EPOCHS):
        for step in range(epoch * STEPS_PER_EPOCH, (epoch + 1) * STEPS_PER_EPOCH):
            if step >= stop:
                return losses
            x, y = tabular.batch(seed, step, BATCH)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if (step + 1) % CKPT_EVERY == 0:
                save_checkpoint(ckpt_dir, step + 1, model, optimizer)
        retrying(torch.save, {"model": model.state_dict(), "epoch": epoch + 1}, ckpt_dir / f"epoch_{epoch + 1}.pt")
    return losses


def average_last(model, ckpt_dir, count=AVERAGE):
    """Load the average of the last `count` epoch checkpoints into `model`; the epochs averaged."""
    saved = sorted(ckpt_dir.glob("epoch_*.pt"), key=lambda p: int(p.stem.split("_")[1]))[-count:]
    states = [torch.load(p, weights_only=True) for p in saved]
    model.load_state_dict({k: sum(s["model"][k] for s in states) / len(states) for k in states[0]["model"]})
    return [s["epoch"] for s in states]


def main(workdir, seed=0, resume=None, until=None):
    faults.flaky("torch.save", fail_on={6}, error=stream_writer_failed, caller=__file__)  # the epoch 3 save
    torch.manual_seed(seed)
    model = tabular.mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    losses = train(model, optimizer, ckpt_dir, start, EPOCHS * STEPS_PER_EPOCH if until is None else until, seed)
    if until is not None:
        return {"steps": len(losses)}
    epochs = average_last(model, ckpt_dir)
    return {"steps": len(losses), "final_loss": sum(losses[-20:]) / len(losses[-20:]),
            "accuracy": tabular.accuracy(model, *tabular.held_out(seed)),
            "epoch_files": len(list(ckpt_dir.glob("epoch_*.pt"))),
            "first_averaged_epoch": epochs[0], "averaged_epochs": len(epochs)}
