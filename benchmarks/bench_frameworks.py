"""What DaiFu costs a framework's training loop that does not crash: paired runs, median ratio.

    python benchmarks/bench_frameworks.py [--framework hf,lightning,accelerate] [--repeats 5]

Each framework's test program (tests/programs/frameworks/: a tiny GPT-2 under `transformers.Trainer`,
a Lightning module, an Accelerate loop) runs in a new process, alternately without DaiFu and under
`daifu run --framework NAME` (for Accelerate, `--vaccinate` of the program's training function, the
one the profile finds in a script). A wrapper times the training alone, from the program's `main()`
call to its end, so that importing the framework and DaiFu is not counted. Printed per framework: the
median wall time of each side and the medians of the paired ratios (with DaiFu / without) of wall time
and of the process's CPU time, which are the figures to read; the runs alternate so that a machine's load
drifts over both sides alike, and the CPU ratio does not count the time a loaded machine kept a run waiting.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "programs" / "frameworks"
FRAMEWORKS = {
    "hf": ("transformers", "hf_trainer", ["--framework", "hf"]),
    "lightning": ("lightning", "lightning_module", ["--framework", "lightning"]),
    "accelerate": ("accelerate", "accelerate_loop", ["--vaccinate", "accelerate_loop:training_function"]),
}
WRAPPER = """
import sys, time
sys.argv = [sys.argv[0], {out!r}]
import {module} as program
started, cpu = time.perf_counter(), time.process_time()
program.main()
print("seconds", time.perf_counter() - started, time.process_time() - cpu)
"""


def timed(folder: Path, module: str, daifu_args: list[str] | None) -> tuple[float, float]:
    """The wall and CPU seconds one run's training took, with `daifu run daifu_args` or with python alone."""
    wrapper = folder / "timed.py"
    wrapper.write_text(WRAPPER.format(out=str(folder / "result.json"), module=module))
    command = [sys.executable, "-m", "daifu", "run", *daifu_args] if daifu_args is not None else [sys.executable]
    env = {**os.environ, "PYTHONPATH": f"{folder}{os.pathsep}{ROOT}", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "DAIFU_WORKSPACE": str(folder / "daifu_workspace")}
    done = subprocess.run([*command, str(wrapper)], capture_output=True, text=True, cwd=folder, env=env, timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.startswith("seconds ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{module} failed:\n{done.stderr[-2000:]}")
    _, wall, cpu = lines[-1].split()
    return float(wall), float(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--framework", default="hf,lightning,accelerate")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"{'framework':<12}{'without (s)':>13}{'with (s)':>10}{'ratio':>8}{'CPU ratio':>11}  wall ratios")
    for name in args.framework.split(","):
        distribution, module, daifu_args = FRAMEWORKS[name]
        if importlib.util.find_spec(distribution) is None:
            print(f"{name:<12}not installed ({distribution})")
            continue
        with tempfile.TemporaryDirectory() as temporary:
            folder = Path(temporary)
            for part in ("digest.py", f"{module}.py"):
                shutil.copy(PROGRAMS / part, folder / part)
            without, with_daifu = [], []
            for _ in range(args.repeats):
                without.append(timed(folder, module, None))
                with_daifu.append(timed(folder, module, daifu_args))
        ratios = [w[0] / p[0] for w, p in zip(with_daifu, without)]
        cpu_ratios = [w[1] / p[1] for w, p in zip(with_daifu, without)]
        print(f"{name:<12}{statistics.median(w for w, _ in without):>13.3f}"
              f"{statistics.median(w for w, _ in with_daifu):>10.3f}{statistics.median(ratios):>8.3f}"
              f"{statistics.median(cpu_ratios):>11.3f}  {json.dumps([round(r, 3) for r in ratios])}")


if __name__ == "__main__":
    main()
