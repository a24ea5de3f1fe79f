"""Classifier that writes its development-set predictions after every epoch (blind1).

A five-class MLP trained for four epochs of 25 steps. After each epoch it predicts the
development rows and appends the predictions, one class per line, to
`output/dev/epoch<N>.txt`, which the error-analysis notebook reads.

Reported: https://github.com/pth1993/NNVLP/issues/1

Fixed: the output folder is made before training (`mkdir(parents=True, exist_ok=True)`); nothing
had created `output/dev`, and `open(..., "a")` does not create folders.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import tabular

EPOCHS, STEPS_PER_EPOCH, BATCH, CKPT_EVERY = 4, 25, 32, 25


def write_predictions(folder, epoch, predicted):
    """Append the predicted classes of the development rows to `folder/epoch<epoch>.txt`."""
    with open(folder / f"epoch{epoch}.txt", "a") as out:
        out.writelines(f"{c}\n" for c in predicted)


@daifu.transform
def train(model, optimizer, dev, out_dir, ckpt_dir, start, stop, seed):
    losses, dev_accuracy = [], []
    for epoch in range(start // STEPS_PER_EPOCH, EPOCHS):
        for step in range(epoch * STEPS_PER_EPOCH, (epoch + 1) * STEPS_PER_EPOCH):
            if step >= stop:
                return losses, dev_accuracy
            x, y = tabular.batch(seed, step, BATCH)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if (step + 1) % CKPT_EVERY == 0:
                save_checkpoint(ckpt_dir, step + 1, model, optimizer)
        with torch.no_grad():
            predicted = model(dev[0]).argmax(1)
        dev_accuracy.append(float((predicted == dev[1]).float().mean()))
        write_predictions(out_dir / "dev", epoch + 1, predicted.tolist())
    return losses, dev_accuracy


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = tabular.mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    start = load_checkpoint(resume, model, optimizer)
    workdir = Path(workdir)
    ckpt_dir = workdir / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    out_dir = workdir / "output"
    (out_dir / "dev").mkdir(parents=True, exist_ok=True)
    dev = tabular.held_out(seed + 1, size=300)
    losses, dev_accuracy = train(model, optimizer, dev, out_dir, ckpt_dir, start,
                                 EPOCHS * STEPS_PER_EPOCH if until is None else until, seed)
    files = sorted((out_dir / "dev").glob("epoch*.txt")) if (out_dir / "dev").is_dir() else []
    lines = [len(f.read_text().splitlines()) for f in files]
    return {"steps": len(losses), "final_loss": sum(losses[-20:]) / len(losses[-20:]),
            "accuracy": tabular.accuracy(model, *tabular.held_out(seed)), "dev_evaluations": len(dev_accuracy),
            "prediction_files": len(files), "prediction_lines": sum(lines), "longest_file": max(lines, default=0)}
