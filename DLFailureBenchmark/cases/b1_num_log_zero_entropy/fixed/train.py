"""Semi-supervised classifier with entropy minimisation on unlabelled rows (blind1).

A five-class MLP trained on labelled rows. From step 60 it also sees unlabelled rows and
minimises the entropy of its sharpened predictions on them (temperature 0.05), which pushes the
decision boundaries away from dense regions. A guard stops the run if the loss is not finite.

Reported: https://github.com/mathiaszinnen/focal_loss_torch/issues/3

Fixed: the entropy is computed from `log_softmax`: sharpened by the temperature, some
probabilities underflow to exactly 0, and `p * torch.log(p)` is then 0 * -inf, NaN.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import tabular

STEPS, BATCH, UNLABELLED, CKPT_EVERY = 120, 32, 64, 20
SEMI_FROM, TEMP, ENT_WEIGHT = 60, 0.05, 0.2


@daifu.transform
def train(model, optimizer, ckpt_dir, start, stop, seed):
    losses, semi_steps = [], 0
    for step in range(start, stop):
        x, y = tabular.batch(seed, step, BATCH)
        supervised = F.cross_entropy(model(x), y)
        ent = torch.zeros(())
        if step >= SEMI_FROM:
            xu, _ = tabular.batch(seed + 99, step, UNLABELLED)
            log_p = F.log_softmax(model(xu) / TEMP, dim=1)
            ent = -(log_p.exp() * log_p).sum(1).mean()
            semi_steps += 1
        loss = supervised + ENT_WEIGHT * ent
        assert torch.isfinite(loss), f"loss is {loss.item()} at step {step}"
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return losses, semi_steps


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = tabular.mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    losses, semi_steps = train(model, optimizer, ckpt_dir, start, STEPS if until is None else until, seed)
    xu, _ = tabular.held_out(seed + 7)
    with torch.no_grad():
        log_p = F.log_softmax(model(xu), dim=1)
        entropy = float(-(log_p.exp() * log_p).sum(1).mean())
    finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    return {"steps": len(losses), "final_loss": sum(losses[-20:]) / len(losses[-20:]),
            "accuracy": tabular.accuracy(model, *tabular.held_out(seed)), "semi_steps": semi_steps,
            "unlabelled_entropy": entropy, "weights_finite": int(finite)}
