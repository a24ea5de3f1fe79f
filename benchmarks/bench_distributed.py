"""In-situ recovery of a 2-rank torchrun job against restarting it from its last checkpoint.

    python benchmarks/bench_distributed.py [--repeats N]

In situ: `examples/distributed_training.py shape` — both ranks hit the same shape bug, rank 0's
policy decides one surgery, rank 1 applies it; the job's restore time is the longest of the ranks'
(from the exception to the resume, from their records). Restart: a new `torchrun` of the same job
that starts two processes, re-initialises the process group, loads the last checkpoint (saved
every 3 steps) and redoes the steps lost since (1 here).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "examples" / "distributed_training.py"


def torchrun(scenario: str, folder: Path, extra: dict[str, str] | None = None) -> float:
    env = {**os.environ, "DAIFU_DIST_GRACE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(extra or {})}
    env["DAIFU_WORKSPACE"] = str(folder / "daifu_workspace")
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone"]
    started = time.perf_counter()
    done = subprocess.run(command + [str(JOB), scenario, str(folder / "out")], cwd=folder, env=env, capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(f"torchrun {scenario} failed:\n{done.stderr.decode()[-3000:]}")

    return time.perf_counter() - started


def in_situ_ms(folder: Path) -> float:
    durations = []
    for path in (folder / "daifu_workspace").glob("repairs.rank*.jsonl"):
        durations += [json.loads(line)["duration_ms"] for line in path.read_text().splitlines()]
    return max(durations)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    repeats = parser.parse_args().repeats
    restores, restarts = [], []
    for _ in range(repeats):
        folder = Path(tempfile.mkdtemp(prefix="daifu-dist-"))
        torchrun("shape", folder)
        restores.append(in_situ_ms(folder))
        restarts.append(torchrun("restart", folder, {"DAIFU_LOST_STEPS": "1"}))
    restore, restart = statistics.median(restores), statistics.median(restarts)
    print(f"2-rank job (gloo, CPU), median of {repeats}:")
    print(f"  in situ: one surgery decided on rank 0, applied on both ranks: {restore:.1f} ms")
    print(f"  restart with torchrun from the last checkpoint, redo 1 step: {restart:.2f} s")
    print(f"  in situ is {restart * 1000 / restore:,.0f}x faster")


if __name__ == "__main__":
    main()
