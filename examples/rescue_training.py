"""A training run that continues from DaiFu's rescue after a crash nothing repaired, or a preemption.

    python examples/rescue_training.py OUT_DIR --crash-at 7     # step 7 meets a corrupt batch: rescued, ends
    python examples/rescue_training.py OUT_DIR --resume         # continues from the rescue to the end

Trains a small model for `--epochs` epochs of 4 steps, drawing random numbers from torch (dropout),
Python's `random` and NumPy. With `--crash-at STEP` the batch of that step is corrupt: a `KeyError` that
nothing repairs (no policy, no console), so DaiFu rescues the run's state before the exception ends it.
With `--resume` the run starts from the newest rescue (`daifu.rescued`): model, optimizer, scheduler and
random generators as they were, from the step that crashed. Either way the final parameters go to
`OUT_DIR/final.pt`, equal to those of a run that never crashed. `--rescue-on SIGTERM` rescues on that
signal too (preemption); `--step-seconds` makes each step last longer, to leave time to send it. Under
torchrun (gloo, CPU) every rank trains on its own batches, averages gradients, and rescues its own shard.
"""

from __future__ import annotations

import argparse
import os
import random
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

import daifu

STEPS_PER_EPOCH = 4


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch of a step: the same in every run, drawn from its own generator."""
    generator = torch.Generator().manual_seed(1000 * rank + step)
    x = torch.randn(16, 8, generator=generator)
    return x, x.sum(dim=1, keepdim=True)


@daifu.transform
def train(model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler,
          start: int, epochs: int, crash_at: int | None, step_seconds: float) -> int:
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    for step in range(start, epochs * STEPS_PER_EPOCH):
        epoch = step // STEPS_PER_EPOCH
        x, y = batch(step, rank)
        if step == crash_at:
            raise KeyError(f"batch {step} of epoch {epoch} has no 'label'")
        jitter = 1e-3 * random.random() + 1e-3 * float(np.random.rand())
        loss = nn.functional.mse_loss(model(x), y) * (1 + jitter)
        optimizer.zero_grad()
        loss.backward()
        for parameter in model.parameters():
            if world > 1:
                dist.all_reduce(parameter.grad)
                parameter.grad /= world
        optimizer.step()
        scheduler.step()
        print(f"rank {rank} epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
        time.sleep(step_seconds)
    return epochs * STEPS_PER_EPOCH


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="where the final parameters go (final.pt, final.rank<r>.pt)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--crash-at", type=int, help="the step whose batch is corrupt")
    parser.add_argument("--resume", action="store_true", help="continue from the newest rescue")
    parser.add_argument("--rescue-on", action="append", default=[], metavar="SIGNAL")
    parser.add_argument("--step-seconds", type=float, default=0.0)
    args = parser.parse_args()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("gloo")
    if args.rescue_on:
        daifu.configure(rescue_on=args.rescue_on)
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.1), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    start = 0
    rescue = daifu.rescued() if args.resume else None
    if rescue is not None:
        rescue.load("model", model)
        rescue.load("optimizer", optimizer)
        rescue.load("scheduler", scheduler)
        rescue.restore_rng()
        start = rescue.position["step"]  # the step that crashed: it never reached optimizer.step()
        print(f"resuming at step {start} from {rescue.path}", flush=True)
    train(model, optimizer, scheduler, start, args.epochs, args.crash_at, args.step_seconds)
    os.makedirs(args.out, exist_ok=True)
    suffix = f".rank{dist.get_rank()}" if dist.is_initialized() else ""
    torch.save(model.state_dict(), os.path.join(args.out, f"final{suffix}.pt"))
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
