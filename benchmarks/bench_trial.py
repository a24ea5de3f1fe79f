"""What a trial costs: fork, plus one training iteration in the sandboxed copy, by model size.

    python benchmarks/bench_trial.py [--sizes 10MB,1GB,4GB] [--repeats 3]

For each size, a one-layer model of that many bytes of float32 parameters trains with SGD; its
loop crashes at the loss (labels of the wrong shape), and a policy tries the fix on a copy of the
run before applying it. Printed side by side: the parent's own iteration time, the time `fork`
took (copy-on-write: it should stay near-constant as the model grows), and the whole trial
(fork, the copy's iteration up to its end-of-iteration signal, the verdict's health check of
every parameter, the verdict back through the pipe). Medians over the repeats.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from typing import Any

import torch
from torch import nn

import daifu

SIZES = {"10MB": 10 * 2**20, "1GB": 2**30, "4GB": 4 * 2**30}


def make(size_bytes: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    side = int((size_bytes / 4) ** 0.5)
    model = nn.Linear(side, side, bias=False)
    return model, torch.optim.SGD(model.parameters(), lr=1e-6)


@daifu.transform
def train(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list[Any], timings: list[float]) -> None:
    for x, y in batches:
        started = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)  # no gradients held at the crash: the copy makes its own
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        timings.append(time.perf_counter() - started)


def measure(size: str, repeats: int) -> dict[str, float]:
    model, optimizer = make(SIZES[size])
    side = model.in_features
    good = [(torch.randn(4, side), torch.randn(4, side)) for _ in range(2)]
    bad = (torch.randn(4, side), torch.randn(4, side + 1))  # labels of the wrong shape
    verdicts: list[daifu.Verdict] = []

    def policy(crash: daifu.Crash) -> daifu.Decision:
        decision = daifu.Action("y = y[:, : x.shape[1]]")
        verdicts.append(crash.trial(decision, 600.0))
        return decision

    daifu.set_policy(policy)
    timings: list[float] = []
    for _ in range(repeats):
        train(model, optimizer, [*good, bad, *good], timings)
    assert all(v.passed for v in verdicts), [v.describe() for v in verdicts]
    return {
        "iteration_ms": statistics.median(timings) * 1000,
        "fork_ms": statistics.median(v.fork_ms for v in verdicts),
        "trial_ms": statistics.median(v.seconds * 1000 + v.fork_ms for v in verdicts),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10MB,1GB,4GB")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    warnings.filterwarnings("ignore", message="Using a target size")  # the crash's own warning
    print(f"{'model':>6}  {'iteration':>10}  {'fork':>8}  {'trial (fork + iteration + health)':>34}")
    for size in args.sizes.split(","):
        found = measure(size, args.repeats)
        print(f"{size:>6}  {found['iteration_ms']:>8.1f} ms  {found['fork_ms']:>5.1f} ms  {found['trial_ms']:>31.1f} ms")


if __name__ == "__main__":
    main()
