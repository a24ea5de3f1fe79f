"""What an in-process trial costs on CPU: snapshot, trial, rollback, by model size.

    python benchmarks/bench_inprocess.py [--sizes 10MB,400MB] [--repeats 3]

For each size, a one-layer model of that many bytes of float32 parameters trains with SGD and
momentum; its loop crashes at the loss (labels of the wrong shape), and a policy tries the fix in
process (`trials="inprocess"`, horizon 0) before applying it. Medians over the repeats:

- iteration: one training iteration, without DaiFu;
- snapshot: copying what the candidate may change (parameters, gradients, optimizer state, RNG,
  the locals' tensors and containers: `daifu.core.rollback.take`);
- trial: the candidate's run, through the trial continuation, to the end of the crashed iteration
  (the verdict's own time: health checks included);
- rollback: putting everything back in place (`Snapshot.restore`);
- crash.trial: all of it as the policy sees it;
- copied: the bytes the snapshot holds (about the model, its gradients and its momentum).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
from torch import nn

import daifu
from daifu.core import trial_memory

SIZES = {"10MB": 10 * 2**20, "100MB": 100 * 2**20, "400MB": 400 * 2**20, "1GB": 2**30}


def make(size_bytes: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    side = int((size_bytes / 4) ** 0.5)
    torch.manual_seed(0)
    model = nn.Linear(side, side, bias=False)
    return model, torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)


def train(model, optimizer, batches, labels):
    for x, y in zip(batches, labels):
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def measure(size_bytes: int) -> dict[str, float]:
    model, optimizer = make(size_bytes)
    side = model.in_features
    batches = [torch.randn(4, side) for _ in range(3)]
    labels = [torch.randn(4, side), torch.randn(4, side + 1), torch.randn(4, side)]
    started = time.perf_counter()
    train(model, optimizer, batches[:1], labels[:1])
    iteration = time.perf_counter() - started
    found: dict[str, float] = {"iteration": iteration}

    def policy(crash: daifu.Crash) -> Any:
        fix = daifu.Action("y = y[:, :-1]")
        started = time.perf_counter()
        verdict = crash.trial(fix, 600.0, horizon=0)
        found.update(total=time.perf_counter() - started, snapshot=verdict.snapshot_ms / 1000,
                     trial=verdict.seconds, rollback=verdict.rollback_ms / 1000, copied=verdict.snapshot_bytes,
                     passed=float(verdict.passed))
        return fix

    daifu.set_policy(policy)
    daifu.transform(train)(model, optimizer, batches, labels)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10MB,400MB")
    parser.add_argument("--repeats", type=int, default=3)
    arguments = parser.parse_args()
    daifu.configure(trials="inprocess", trial_seconds=600)
    print(f"{'model':>7} {'iteration':>10} {'snapshot':>9} {'trial':>8} {'rollback':>9} {'crash.trial':>12} "
          f"{'copied':>9} passed")
    for name in arguments.sizes.split(","):
        runs = [measure(SIZES[name]) for _ in range(arguments.repeats)]

        def median(key: str) -> float:
            return statistics.median(run[key] for run in runs)

        print(f"{name:>7} {median('iteration') * 1000:>8.0f}ms {median('snapshot') * 1000:>7.0f}ms "
              f"{median('trial') * 1000:>6.0f}ms {median('rollback') * 1000:>7.0f}ms {median('total') * 1000:>10.0f}ms "
              f"{trial_memory.size(int(median('copied'))):>9} {all(run['passed'] for run in runs)}")


if __name__ == "__main__":
    main()
