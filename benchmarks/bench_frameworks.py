"""What DaiFu costs a framework's training loop that does not crash: paired runs, median ratio.

    python benchmarks/bench_frameworks.py [--framework hf,lightning,accelerate] [--repeats 5]

Each framework's test program (tests/programs/frameworks/: a tiny GPT-2 under `transformers.Trainer`,
a Lightning module, an Accelerate loop) runs in a new process, alternately without DaiFu and under
`daifu run --framework NAME` (for Accelerate, `--vaccinate` of the program's training function, the
one the profile finds in a script). A wrapper times the training alone, from the program's `main()`
call to its end, so that importing the framework and DaiFu is not counted. Printed per framework: the
median of each side and the median of the paired ratios (with DaiFu / without), which is the figure to
read; the runs alternate so that a machine's load drifts over both sides alike.
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
started = time.perf_counter()
program.main()
print("seconds", time.perf_counter() - started)
"""


def timed(folder: Path, module: str, daifu_args: list[str] | None) -> float:
    """The seconds one run's training took, with `daifu run daifu_args` or with python alone."""
    wrapper = folder / "timed.py"
    wrapper.write_text(WRAPPER.format(out=str(folder / "result.json"), module=module))
    command = [sys.executable, "-m", "daifu", "run", *daifu_args] if daifu_args is not None else [sys.executable]
    env = {**os.environ, "PYTHONPATH": f"{folder}{os.pathsep}{ROOT}", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "DAIFU_WORKSPACE": str(folder / "daifu_workspace")}
    done = subprocess.run([*command, str(wrapper)], capture_output=True, text=True, cwd=folder, env=env, timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.startswith("seconds ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{module} failed:\n{done.stderr[-2000:]}")
    return float(lines[-1].split()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--framework", default="hf,lightning,accelerate")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"{'framework':<12}{'without (s)':>13}{'with (s)':>10}{'ratio':>8}  ratios")
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
        ratios = [w / p for w, p in zip(with_daifu, without)]
        print(f"{name:<12}{statistics.median(without):>13.3f}{statistics.median(with_daifu):>10.3f}"
              f"{statistics.median(ratios):>8.3f}  {json.dumps([round(r, 3) for r in ratios])}")


if __name__ == "__main__":
    main()
