"""What a rescue costs: the time from a crash nothing repairs to its exception leaving the function.

A model of N `Linear(1000, 1000)` layers (N million parameters) is trained one step with Adam, so the
rescue holds the parameters and twice as much optimizer state; then the vaccinated function raises and
no one repairs it. The run writes its rescue into a temporary workspace, removed at the end.

    python benchmarks/bench_rescue.py 1 25 100
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import torch
from torch import nn

import daifu

started: list[float] = []


@daifu.transform
def crash_at_step_two() -> None:
    for step in range(3):
        if step == 2:
            started.append(time.perf_counter())
            raise KeyError("not repaired")


def measure(millions: int) -> None:
    model = nn.Sequential(*[nn.Linear(1000, 1000) for _ in range(millions)])
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 1000)).sum().backward()
    optimizer.step()
    try:
        crash_at_step_two()  # the model and optimizer are found in this caller's frame
    except KeyError:
        seconds = time.perf_counter() - started[-1]
        print(f"{millions}M parameters + Adam: from the crash to the exception {seconds:.2f} s", flush=True)


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        daifu.configure(workspace=os.path.join(folder, "daifu_workspace"))
        for argument in sys.argv[1:] or ["1", "25"]:
            measure(int(argument))


if __name__ == "__main__":
    main()
