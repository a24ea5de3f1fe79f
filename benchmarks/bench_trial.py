"""What a trial costs: time and memory, by model size, with the model private or in shared memory.

    python benchmarks/bench_trial.py [--sizes 10MB,1GB] [--shared] [--repeats 3] [--horizon 5]

For each size, a one-layer model of that many bytes of float32 parameters trains with SGD; its
loop crashes at the loss (labels of the wrong shape), and a policy tries the fix on a copy of the
run before applying it. Printed side by side, medians over the repeats:

- iteration: the parent's own training iteration, without DaiFu;
- fork: the `fork` itself (copy-on-write: near-constant as the model grows);
- in copy: the copy's time from the fork to its end-of-iteration signal: detaching from the live
  run (shared memory copied, files re-opened), the sandbox, the iteration;
- trial: all of `crash.trial` as the policy sees it: the health inventory and the memory estimate
  before the fork, the fork, the copy's work, its health check of every parameter and gradient,
  the verdict back through the pipe, the copy's exit;
- peak: the memory the copy took beyond what it shared with the live run (`Verdict.peak_bytes`);
  a step rewrites every parameter and makes every gradient, so about twice the model;
- estimate: what DaiFu estimated before forking (`daifu.core.trial_memory.estimate`), plus the
  shared memory the copy copies when there is room for it (`daifu.core.isolate`).

Each size is measured twice: with a horizon of 0 (the copy ends with the crashed iteration) and of
`--horizon` iterations past it (`daifu.core.horizon`; the trial's time is not what stops it here). The
second table gives what the horizon adds: the trial with it, the iterations the copy saw past the
crash, and per iteration of horizon the trial's extra time ((trial with it - trial without) / iterations)
and the median time of one such iteration in the copy (its step, the health check of every parameter
and gradient at its end, the line counting of the repair's code).

`--shared` calls `model.share_memory()` first (Hogwild-style): the copy then copies the model out of
shared memory before it runs, and its time shows what that costs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

import daifu
from daifu.core import health, isolate, trial_memory

SIZES = {"10MB": 10 * 2**20, "100MB": 100 * 2**20, "1GB": 2**30, "4GB": 4 * 2**30}


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


def measure(size: str, repeats: int, shared: bool, horizon: int) -> dict[str, float]:
    model, optimizer = make(SIZES[size])
    if shared:
        model.share_memory()
    side = model.in_features
    good = [(torch.randn(4, side), torch.randn(4, side)) for _ in range(max(horizon, 1) + 1)]
    bad = (torch.randn(4, side), torch.randn(4, side + 1))  # labels of the wrong shape
    verdicts: list[daifu.Verdict] = []
    walls: list[float] = []
    estimates: list[int] = []

    def policy(crash: daifu.Crash) -> daifu.Decision:
        decision = daifu.Action("y = y[:, : x.shape[1]]")
        watched = dict(crash.locals)
        shared = sum(region.size for region in isolate.shared_writable() if region.copyable)
        estimates.append(trial_memory.estimate(health.inventory(watched), watched).total + shared)
        started = time.perf_counter()
        verdicts.append(crash.trial(decision, 600.0, horizon=horizon))
        walls.append(time.perf_counter() - started)
        return decision

    daifu.set_policy(policy)
    timings: list[float] = []
    for _ in range(repeats):
        train(model, optimizer, [*good[:2], bad, *good], timings)
    assert all(v.passed for v in verdicts), [v.describe() for v in verdicts]
    past = [it.seconds for v in verdicts for it in v.iterations if it.index >= 1]
    return {
        "seen": statistics.median(sum(1 for it in v.iterations if it.index >= 1) for v in verdicts),
        "past_ms": statistics.median(past) * 1000 if past else 0.0,
        "iteration_ms": statistics.median(timings) * 1000,
        "fork_ms": statistics.median(v.fork_ms for v in verdicts),
        "copy_ms": statistics.median(v.seconds * 1000 for v in verdicts),
        "trial_ms": statistics.median(walls) * 1000,
        "peak": statistics.median(v.peak_bytes for v in verdicts),
        "estimate": statistics.median(estimates),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10MB,1GB")
    parser.add_argument("--shared", action="store_true", help="the model in shared memory (model.share_memory())")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--horizon", type=int, default=5, help="iterations past the crashed one the copy runs")
    parser.add_argument("--json", type=Path, help="also write the figures to this file (`bench_all.py`)")
    args = parser.parse_args()
    torch.manual_seed(0)
    warnings.filterwarnings("ignore", message="Using a target size")  # the crash's own warning
    size = trial_memory.size
    print(f"{'model':>12}  {'iteration':>10}  {'fork':>8}  {'in copy':>10}  {'trial':>10}  {'peak':>9}  {'estimate':>9}")
    ahead = []
    for name in args.sizes.split(","):
        found = measure(name, args.repeats, args.shared, 0)
        label = f"{name} shared" if args.shared else name
        print(f"{label:>12}  {found['iteration_ms']:>7.1f} ms  {found['fork_ms']:>5.1f} ms  {found['copy_ms']:>7.1f} ms"
              f"  {found['trial_ms']:>7.1f} ms  {size(int(found['peak'])):>9}  {size(int(found['estimate'])):>9}")
        ahead.append((label, found, measure(name, args.repeats, args.shared, args.horizon)))
    print(f"\nwith a horizon of {args.horizon} iterations past the crashed one:")
    print(f"{'model':>12}  {'trial':>10}  {'seen':>5}  {'per iteration':>13}  {'one in copy':>11}  {'peak':>9}")
    figures = {}
    for label, without, found in ahead:
        per = (found["trial_ms"] - without["trial_ms"]) / max(found["seen"], 1)
        print(f"{label:>12}  {found['trial_ms']:>7.1f} ms  {found['seen']:>5.0f}  {per:>10.1f} ms  "
              f"{found['past_ms']:>8.1f} ms  {size(int(found['peak'])):>9}")
        figures[label] = {"fork_ms": without["fork_ms"], "trial_ms": without["trial_ms"], "horizon_per_iteration_ms": per}
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
