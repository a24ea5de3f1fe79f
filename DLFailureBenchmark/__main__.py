"""`python -m DLFailureBenchmark [--quick|--smoke|--repairs-only|--replay-only] [--case ID ...] [--scenario NAME ...]
[--set NAME ...] [--out DIR]`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from DLFailureBenchmark import cases, harness, report


def _progress(done: int, total: int, current: str, elapsed: float) -> None:
    width = 30
    filled = width * done // max(total, 1)
    line = f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {elapsed / 60:5.1f} min  {current}"
    if sys.stderr.isatty():
        print(f"\r{line:<100}", end="" if done < total else "\n", file=sys.stderr, flush=True)
    else:
        print(line, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m DLFailureBenchmark",
                                     description="Real crashing DL programs, recovered in situ by DaiFu, and measured.")
    parser.add_argument("--case", action="append", help="a case id (or its prefix); repeatable")
    parser.add_argument("--scenario", action="append", choices=sorted(cases.SCENARIOS), help="repeatable")
    parser.add_argument("--set", action="append", choices=cases.SETS,
                        help="tuned (the 36 cases the rules were written with), holdout (written blind to them), "
                             "realistic (full-sized programs of common model families), blind1 to blind4 "
                             "(real reports, written blind to the bot); repeatable")
    parser.add_argument("--quick", action="store_true",
                        help="the CI subset, with fewer repeats (under 3 minutes); with --case or --set, only "
                             "the fewer repeats")
    parser.add_argument("--smoke", action="store_true",
                        help="the test suite's end-to-end check: the first 2 quick cases (or those named), "
                             "one checkpoint-retry run, no overhead measure (about 1 minute)")
    parser.add_argument("--repairs-only", action="store_true",
                        help="only the repair flows: per case the fixed, buggy, replay and automatic runs; no "
                             "checkpoint-retry baseline and no overhead measure")
    parser.add_argument("--replay-only", action="store_true",
                        help="per case only the fixed, buggy and replay runs: the repair bot is never started "
                             "nor asked (checks a case's recorded repair without an automatic run)")
    parser.add_argument("--out", type=Path, default=cases.HERE / "results",
                        help="where results.json and results.md go (default: DLFailureBenchmark/results)")
    parser.add_argument("--workdir", type=Path, help="keep every run's folder here (default: a temporary folder)")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    options = parser.parse_args(argv)
    subset = options.quick and not (options.case or options.set)
    selected = cases.select(options.case, options.scenario, quick=subset, sets=options.set)
    if options.smoke and not (options.case or options.set):
        selected = cases.select(quick=True)[:2]
    if options.list:
        for case in selected:
            print(f"{case.id:<42} {case.set:<9} {case.scenario:<18} {case.description}")
        return 0
    if options.repairs_only and (options.quick or options.smoke):
        parser.error("--repairs-only measures no baseline or overhead: it takes neither --quick nor --smoke")
    if options.replay_only and (options.quick or options.smoke or options.repairs_only):
        parser.error("--replay-only runs only fixed, buggy and replay: it takes no --quick, --smoke or --repairs-only")
    plan = (harness.REPLAY_ONLY if options.replay_only else harness.REPAIRS_ONLY if options.repairs_only
            else harness.SMOKE if options.smoke else harness.QUICK if options.quick else harness.Plan())
    results = harness.run_all(selected, plan, options.workdir, _progress)
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / "results.json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    (options.out / "results.md").write_text(report.markdown(results), encoding="utf-8")
    print(report.text_table(results))
    print(f"\nwritten: {options.out / 'results.json'}, {options.out / 'results.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
