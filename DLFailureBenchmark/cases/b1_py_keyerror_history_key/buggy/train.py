"""Classifier with a training history and best-weights keeping (blind1).

A five-class MLP validated every 30 steps. The script keeps a history of the training loss and
of the validation loss and accuracy (written to `history.json` for the plots), saves the weights
whenever the validation accuracy improves, and restores the best weights at the end.

Reported: https://github.com/fchollet/deep-learning-with-python-notebooks/issues/16
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import tabular

STEPS, BATCH, CKPT_EVERY, EVAL_EVERY = 120, 32, 20, 30


@torch.no_grad()
def evaluate(model, val):
    x, y = val
    logits = model(x)
    return float(F.cross_entropy(logits, y)), float((logits.argmax(1) == y).float().mean())


@daifu.transform
def train(model, optimizer, val, workdir, ckpt_dir, start, stop, seed):
    history = {"loss": [], "val_loss": [], "val_accuracy": []}
    best_accuracy, best_step = -1.0, 0
    for step in range(start, stop):
        x, y = tabular.batch(seed, step, BATCH)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history["loss"].append(loss.item())
        if (step + 1) % EVAL_EVERY == 0:
            val_loss, val_accuracy = evaluate(model, val)
            history["val_loss"].append(val_loss)
            history["val_acc"].append(val_accuracy)
            if val_accuracy > best_accuracy:
                best_accuracy, best_step = val_accuracy, step + 1
                torch.save(model.state_dict(), workdir / "best.pt")
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    (workdir / "history.json").write_text(json.dumps(history))
    return history, best_step


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = tabular.mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    start = load_checkpoint(resume, model, optimizer)
    workdir = Path(workdir)
    ckpt_dir = workdir / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    val = tabular.held_out(seed, size=400)
    history, best_step = train(model, optimizer, val, workdir, ckpt_dir, start, STEPS if until is None else until,
                               seed)
    if best_step:
        model.load_state_dict(torch.load(workdir / "best.pt", weights_only=True))
    saved = json.loads((workdir / "history.json").read_text())
    return {"steps": len(history["loss"]), "final_loss": sum(history["loss"][-20:]) / len(history["loss"][-20:]),
            "accuracy": tabular.accuracy(model, *tabular.held_out(seed + 1)), "best_step": best_step,
            "val_points": len(saved.get("val_accuracy", [])), "val_loss_points": len(saved.get("val_loss", []))}
