"""What `import daifu` and the first `@daifu.transform` cost a program, in CPU time.

    python benchmarks/bench_import.py [--runs 15] [--no-bytecode-cache]

Each measurement is a fresh interpreter that reads `time.process_time()`, does the work, reads it
again and prints the difference: interpreter start-up is left out, and CPU time (not wall time)
keeps a busy machine's other processes out of the figure. Two children are measured in pairs,
alternating which runs first: a baseline that runs `import json`, and one that runs `import daifu`
then vaccinates a four-line function (the path every vaccinated program takes before its first
crash: the first vaccination also loads what a repair goes through, so that a first crash does not
pay for it); a third child runs `import daifu` alone (what a tool that only imports DaiFu pays). Printed: the median of each, and the median of the per-pair ratios, with the number of
modules the daifu child had loaded.

Bytecode is cached as an installed package's is (in a temporary `PYTHONPYCACHEPREFIX`, warmed by
one unmeasured run of each child), unless `--no-bytecode-cache`, which compiles every module from
source each time (as under `PYTHONDONTWRITEBYTECODE=1` with no cache present).
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

BASELINE = """
import time
started = time.process_time()
import json
print(time.process_time() - started, 0)
"""

DAIFU = """
import time
started = time.process_time()
import daifu


@daifu.transform
def step(x):
    y = x + 1
    return y * 2


spent = time.process_time() - started
import sys
assert step(1) == 4 and hasattr(step, "__daifu__"), "the function was not vaccinated"
print(spent, len(sys.modules))
"""


IMPORT_ONLY = """
import time
started = time.process_time()
import daifu
spent = time.process_time() - started
import sys
print(spent, len(sys.modules))
"""


def child(script: Path, env: dict[str, str]) -> tuple[float, int]:
    """CPU seconds the child spent on its measured part, and how many modules it had loaded."""
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=script.parent)
    if done.returncode != 0:
        raise SystemExit(f"{script.name} failed:\n{done.stderr}")
    seconds, modules = done.stdout.split()
    return float(seconds), int(modules)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="pairs of children to measure (default 15)")
    parser.add_argument("--no-bytecode-cache", action="store_true", help="compile every module from source")
    parser.add_argument("--json", type=Path, help="also write the medians to this file (`bench_all.py`)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="daifu-bench-import-"))
    baseline, vaccinating, importing = folder / "baseline.py", folder / "vaccinating.py", folder / "importing.py"
    baseline.write_text(textwrap.dedent(BASELINE))
    vaccinating.write_text(textwrap.dedent(DAIFU))
    importing.write_text(textwrap.dedent(IMPORT_ONLY))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["DAIFU_RECORD"] = str(folder / "experiment_record.log")
    if args.no_bytecode_cache:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
        child(baseline, env), child(vaccinating, env), child(importing, env)  # warm the cache: not measured
    json_times, daifu_times, import_times, ratios, modules = [], [], [], [], 0
    for run in range(args.runs):
        order = (baseline, vaccinating) if run % 2 == 0 else (vaccinating, baseline)
        spent = {script: child(script, env) for script in order}
        json_times.append(spent[baseline][0])
        daifu_times.append(spent[vaccinating][0])
        modules = spent[vaccinating][1]
        import_times.append(child(importing, env)[0])
        ratios.append(spent[vaccinating][0] / max(spent[baseline][0], 1e-6))
    cache = "compiled from source" if args.no_bytecode_cache else "cached bytecode"
    print(f"CPU time in a fresh interpreter, median of {args.runs} paired runs ({cache}):")
    print(f"  import json                              {statistics.median(json_times) * 1e3:8.1f} ms")
    print(f"  import daifu alone                       {statistics.median(import_times) * 1e3:8.1f} ms")
    print(f"  import daifu + vaccinate one function    {statistics.median(daifu_times) * 1e3:8.1f} ms"
          f"   ({modules} modules loaded)")
    print(f"  ratio daifu / json (median of pairs)     {statistics.median(ratios):8.1f} x")
    if args.json is not None:
        args.json.write_text(json.dumps({"import_json_ms": statistics.median(json_times) * 1e3,
                                         "import_daifu_ms": statistics.median(import_times) * 1e3,
                                         "import_and_vaccinate_ms": statistics.median(daifu_times) * 1e3}))


if __name__ == "__main__":
    main()
