"""Path problem (MNIST-style CNN), holdout: the best weights are saved as `best.pt` and read back as `best.pth`.

Every 20 steps the script keeps the weights with the best validation accuracy in `best.pt`. At
step 80 the fine-tuning stage starts from them with a lower learning rate, and reads them back
from `best.pth`, the extension another project of the author's used.

Fixed: the name it was saved under, `best.pt`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import cnn

STEPS, BATCH, EVAL_EVERY, CKPT_EVERY = 120, 32, 20, 25
FINETUNE_AT = 80


@daifu.transform
def train(model, optimizer, val, ckpt_dir, start, stop, seed):
    x_val, y_val = val
    losses, best = [], 0.0
    for step in range(start, stop):
        if step == FINETUNE_AT:  # fine-tuning: back to the best weights, a quarter of the learning rate
            model.load_state_dict(torch.load(ckpt_dir / "best.pt"))
            for group in optimizer.param_groups:
                group["lr"] = group["lr"] / 4
        x, y = cnn.batch(seed, step, BATCH)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % EVAL_EVERY == 0:
            accuracy = cnn.accuracy(model, x_val[:256], y_val[:256])
            if accuracy > best:
                best = accuracy
                torch.save(model.state_dict(), ckpt_dir / "best.pt")
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return cnn.metrics(model, val, losses, len(losses))


def main(workdir, seed=0, resume=None, until=None):
    model, optimizer = cnn.build(seed)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, cnn.validation(seed), ckpt_dir, start, STEPS if until is None else until, seed)
