"""Every speed figure of issue 36 in one run, beside the figures stored from an earlier run and the targets.

    python benchmarks/bench_all.py [--quick] [--save]

Runs, each in its own interpreter: `bench_import.py` (CPU time of `import daifu` and of the first
vaccination), `bench_runtime.py --restore-only` (restore times under a policy on the 100-line training
function), `bench_automatic.py` (automatic mode's crash to resume, the decision layer loaded ahead and
not) and `bench_trial.py --sizes 10MB` (a trial's fork, all of it, and each iteration of its horizon).
Prints one table: each figure now, as stored in `benchmarks/figures.json` (the commit it was measured
at, and when), and the issue's target where it sets one. `--save` stores this run's figures there, with
the commit it ran on: run it when a change that moves them is committed, so that the next run prints
them beside its own.

The figures are medians; the CPU-time ones keep a loaded machine's other work out, the wall-clock ones
do not (compare them only between runs of the same hour).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
STORED = HERE / "figures.json"

FIGURES: list[tuple[str, str, str, float | None]] = [
    ("import", "import_daifu_ms", "import daifu (CPU ms)", None),
    ("import", "import_and_vaccinate_ms", "import daifu + vaccinate one function (CPU ms)", None),
    ("runtime", "Retry (cold)", "restore, Retry, first crash of a site (ms)", 0.4),
    ("runtime", "Retry (warm)", "restore, Retry, repeated crash (ms)", 0.35),
    ("runtime", "Action (cold)", "restore, Action, first crash (ms)", None),
    ("runtime", "Surgery (cold)", "restore, one-line Surgery (ms)", 1.5),
    ("automatic", "warm.first_cpu_ms", "automatic, first crash, crash to resume (CPU ms)", None),
    ("automatic", "warm.first_wall_ms", "automatic, first crash, crash to resume (wall ms)", 150.0),
    ("automatic", "warm.repeat_cpu_ms", "automatic, repeat, crash to resume (CPU ms)", None),
    ("automatic", "warm.repeat_wall_ms", "automatic, repeat, crash to resume (wall ms)", 60.0),
    ("automatic", "cold.first_cpu_ms", "  without loading ahead: first crash (CPU ms)", None),
    ("automatic", "cold.first_wall_ms", "  without loading ahead: first crash (wall ms)", None),
    ("trial", "10MB.fork_ms", "trial, 10 MB model: fork (ms)", None),
    ("trial", "10MB.trial_ms", "trial, 10 MB model: all of it (ms)", None),
    ("trial", "10MB.horizon_per_iteration_ms", "trial, 10 MB model: per iteration of horizon (ms)", None),
]
"""(bench, key in its JSON (`a.b`: nested), what the figure is, the issue's target or None)."""


def commands(quick: bool) -> dict[str, list[str]]:
    """Each bench's command line, writing its JSON to `{json}`."""
    return {
        "import": ["bench_import.py", "--runs", "5" if quick else "15"],
        "runtime": ["bench_runtime.py", "--restore-only"] + (["--quick"] if quick else []),
        "automatic": ["bench_automatic.py", "--runs", "2" if quick else "5"],
        "trial": ["bench_trial.py", "--sizes", "10MB", "--repeats", "2" if quick else "3"],
    }


def run_all(quick: bool) -> dict[str, Any]:
    """Every bench's figures, by bench; a bench that failed gives `{"error": ...}` and the others go on."""
    found: dict[str, Any] = {}
    folder = Path(tempfile.mkdtemp(prefix="daifu-bench-all-"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    for bench, command in commands(quick).items():
        target = folder / f"{bench}.json"
        print(f"running {' '.join(command)} ...", file=sys.stderr, flush=True)
        done = subprocess.run([sys.executable, str(HERE / command[0]), *command[1:], "--json", str(target)],
                              capture_output=True, text=True, env=env, cwd=folder)
        if done.returncode != 0 or not target.exists():
            found[bench] = {"error": done.stderr.strip().splitlines()[-1:] or [f"status {done.returncode}"]}
            continue
        found[bench] = json.loads(target.read_text())
    return found


def value(figures: dict[str, Any], bench: str, key: str) -> float | None:
    node: Any = figures.get(bench, {})
    for part in key.split(".") if bench in ("automatic", "trial") else [key]:
        node = node.get(part) if isinstance(node, dict) else None
    return float(node) if isinstance(node, (int, float)) else None


def table(now: dict[str, Any], stored: dict[str, Any] | None) -> str:
    before = stored.get("figures", {}) if stored else {}
    when = f"{stored['commit'][:9]}, {stored['date']}, load {stored.get('load', '?')}" if stored else "none stored"
    lines = [f"{'figure':52s}{'now':>10s}{'stored':>10s}{'target':>10s}   (stored: {when})"]
    for bench, key, label, target in FIGURES:
        cells = [value(now, bench, key), value(before, bench, key), target]
        lines.append(f"{label:52s}" + "".join(f"{c:10.2f}" if c is not None else f"{'-':>10s}" for c in cells))
    failed = [f"{bench}: {figures['error']}" for bench, figures in now.items() if "error" in figures]
    return "\n".join(lines + [f"failed: {line}" for line in failed])


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    return done.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--save", action="store_true", help=f"store this run's figures in {STORED.name}")
    args = parser.parse_args()
    stored = json.loads(STORED.read_text()) if STORED.exists() else None
    load = round(os.getloadavg()[0], 1)
    now = run_all(args.quick)
    print(table(now, stored))
    print(f"now: load {load} at the start ({os.cpu_count()} CPUs)")
    if args.save:
        STORED.write_text(json.dumps({"commit": commit(), "date": time.strftime("%Y-%m-%d %H:%M"), "load": load,
                                      "figures": now}, indent=1) + "\n")
        print(f"stored in {STORED}")


if __name__ == "__main__":
    main()
