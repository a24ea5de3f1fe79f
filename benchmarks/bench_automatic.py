"""Automatic mode, crash to resume: the first crash of a site and a repeat, with and without the warm-up.

    python benchmarks/bench_automatic.py [--runs 5]

Each run is a fresh interpreter training a small model (an MLP, 40 steps, automatic mode, the embedded
rules engine, trials on) that writes a log line into a folder it has not made at step 20, and removes
the folder after the line, so step 30 crashes at the same statement again. The program reads its own
clocks just before the faulty statement and just after it (when the repair has resumed the run):
crash-to-resume in wall time, and in the process's CPU time (the trial's copy is another process: its
time shows in the wall figure only).

Two children are measured in pairs, alternating which runs first: as a program runs (the decision
layer loaded ahead of the first crash by `daifu.decide.warm`), and with that loading turned off (what
a first crash cost before it: the imports at the crash). Printed: the medians of each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROGRAM = """
import json
import os
import shutil
import sys
import time

import torch
from torch import nn

import daifu

if sys.argv[2] == "cold":
    from daifu.decide import warm

    warm.start = lambda: None  # the decision layer then loads at the first crash, as before issue 36

marks = []


@daifu.transform
def train(model, optimizer, data, folder):
    for step, (x, y) in enumerate(data):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        if step in (20, 30):
            marks.append((time.perf_counter(), time.process_time()))
            with open(os.path.join(folder, "log.txt"), "a") as out:
                out.write(f"{step} {loss.item():.4f}\\n")
            marks.append((time.perf_counter(), time.process_time()))
            shutil.rmtree(folder)


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = [(torch.randn(16, 32), torch.randint(0, 4, (16,))) for _ in range(40)]
train(model, optimizer, data, os.path.join(sys.argv[1], "logs"))
print(json.dumps([[(b[0] - a[0]) * 1000, (b[1] - a[1]) * 1000] for a, b in zip(marks[::2], marks[1::2])]))
"""


def child(script: Path, variant: str, folder: Path) -> list[list[float]]:
    """[[wall ms, CPU ms] of the first crash, the same of the repeat] of one fresh run."""
    work = Path(tempfile.mkdtemp(dir=folder))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "DAIFU_MODE": "automatic", "DAIFU_APPROVE": "auto", "DAIFU_WORKSPACE": str(work / "ws"),
           "DAIFU_RECORD": str(work / "record.log"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(script), str(work), variant], capture_output=True, text=True,
                          env=env, cwd=work, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"the {variant} run failed:\n{done.stderr[-3000:]}")
    crashes: list[list[float]] = json.loads(done.stdout.splitlines()[-1])
    if len(crashes) != 2:
        raise SystemExit(f"the {variant} run was not repaired twice:\n{done.stderr[-3000:]}")
    return crashes


def measure(runs: int) -> dict[str, dict[str, float]]:
    """Median wall and CPU ms of the first crash and the repeat, for `warm` and `cold` runs."""
    folder = Path(tempfile.mkdtemp(prefix="daifu-bench-automatic-"))
    script = folder / "train.py"
    script.write_text(textwrap.dedent(PROGRAM))
    seen: dict[str, list[list[list[float]]]] = {"warm": [], "cold": []}
    for run in range(runs):
        for variant in ("warm", "cold") if run % 2 == 0 else ("cold", "warm"):
            seen[variant].append(child(script, variant, folder))
    return {
        variant: {
            f"{crash}_{clock}_ms": round(statistics.median(r[index][which] for r in results), 1)
            for index, crash in enumerate(("first", "repeat"))
            for which, clock in enumerate(("wall", "cpu"))
        }
        for variant, results in seen.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="pairs of runs (default 5)")
    parser.add_argument("--json", type=Path, help="also write the medians to this file (`bench_all.py`)")
    args = parser.parse_args()
    figures = measure(args.runs)
    if args.json is not None:
        args.json.write_text(json.dumps(figures))
    print(f"automatic mode, crash to resume (small MLP, rules engine, one trial), median of {args.runs} pairs:")
    print(f"  {'':41s}{'wall ms':>10s}{'CPU ms':>10s}")
    for variant, label in (("warm", "decision layer loaded ahead"), ("cold", "loaded at the first crash")):
        f = figures[variant]
        print(f"  first crash, {label:28s}{f['first_wall_ms']:10.1f}{f['first_cpu_ms']:10.1f}")
        print(f"  repeat,      {label:28s}{f['repeat_wall_ms']:10.1f}{f['repeat_cpu_ms']:10.1f}")


if __name__ == "__main__":
    main()
