"""The results as a table: for the terminal, and as Markdown for the benchmark's README.

`python -m DLFailureBenchmark.report [--results FILE] [--plot [PNG]]` prints the table of a
`results.json` again, and with `--plot` draws it (`DLFailureBenchmark.figure`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FIGURE = HERE / "restore_vs_retry.png"

COLUMNS = ("case", "set", "scenario", "crashed", "crash at", "replay", "restore ms", "auto", "auto ms",
           "candidates / trials / time to repair", "retry s (redone)", "speed-up", "overhead")


def _mark(flag: bool) -> str:
    return "yes" if flag else "NO"


def _number(value: float | None, digits: int = 1, suffix: str = "") -> str:
    return "-" if value is None else f"{value:,.{digits}f}{suffix}"


def effort_cell(effort: dict[str, Any] | None) -> str:
    """`candidates / trials / time to repair` of the automatic run, "-" when its record holds no trials."""
    if not effort:
        return "-"
    return f"{effort['candidates']} / {effort['trials']} / {_number(effort['repair_ms'], 1)} ms"


OUTCOME_TEXT = {"recovered": "yes", "harmful": "harmful", "declined": "NO", "failed": "failed", None: "-"}
"""How a run's outcome reads in the table (`harness.outcome`); "-" for a run not made."""


def outcome_cell(run: dict[str, Any]) -> str:
    """The table cell of one replay or automatic run; results written before outcomes existed are read too."""
    if "outcome" in run:
        return OUTCOME_TEXT[run["outcome"]]
    return "yes" if run["recovered"] else ("finished, off" if run["finished"] else "NO")


def cells(row: dict[str, Any]) -> list[str]:
    base = row["baseline"]
    auto = row["automatic"]
    auto_text = outcome_cell(auto)
    replay_text = outcome_cell(row["replay"])
    crash_at = f"{row['crash_step']}/{row['total_steps']}" if row["crash_step"] is not None else "-"
    redone = f" ({base['redone_steps']})" if base.get("redone_steps") is not None else ""
    return [row["id"], row.get("set", "tuned"), row["scenario"], _mark(row["crashed_as_expected"]), crash_at,
            replay_text, _number(row["replay"]["restore_ms"], 2), auto_text, _number(auto["restore_ms"], 1),
            effort_cell(auto.get("effort")), _number(base.get("median_s"), 2) + redone, _number(row["speedup"], 0, "x"),
            _number(row["overhead"]["median_percent"], 2, "%")]


def set_lines(sets: dict[str, dict[str, Any]]) -> list[str]:
    """One line per set: the automatic rate of each set on its own (the tuned one is not a generalisation),
    and its automatic runs by outcome (recovered, harmful, declined, failed)."""
    return [
        f"{name}: crashed as expected {c['crashed_as_expected']}/{c['cases']}; replay {c['recovered_replay']}/"
        f"{c['cases']}; recovered automatically {c['recovered_automatic']}/{c['cases']} "
        f"({100.0 * c['recovered_automatic'] / c['cases']:.0f}%), finished off tolerance "
        f"{c['finished_off_automatic']}{_outcome_counts(c)}"
        for name, c in sets.items()
    ]


def _outcome_counts(counts: dict[str, Any]) -> str:
    """"; automatic: recovered R, harmful H, declined D, failed F, not run N" ("" for results without outcomes)."""
    outcomes = counts.get("automatic_outcomes")
    if outcomes is None:
        return ""
    not_run = counts["cases"] - sum(outcomes.values())
    return ("; automatic: " + ", ".join(f"{kind} {number}" for kind, number in outcomes.items())
            + (f", not run {not_run}" if not_run else ""))


def summary_lines(summary: dict[str, Any]) -> list[str]:
    s = summary
    return [
        f"cases: {s['cases']}; crashed as expected: {s['crashed_as_expected']}/{s['cases']}",
        f"recovered in replay mode: {s['recovered_replay']}/{s['cases']}; " + (
            "automatic runs: not made (--replay-only)" if s.get("automatic_not_run") == s["cases"] else
            f"recovered automatically (rules bot): {s['recovered_automatic']}/{s['cases']}"),
        *set_lines(s.get("sets", {})),
        f"restore time, replay: median {_number(s['median_restore_ms_replay'], 2)} ms, "
        f"max {_number(s['max_restore_ms_replay'], 2)} ms; automatic: median "
        f"{_number(s['median_restore_ms_automatic'], 1)} ms",
        *_baseline_lines(s),
    ]


def _baseline_lines(s: dict[str, Any]) -> list[str]:
    """The checkpoint-retry and overhead lines; one line saying so when neither was measured (`--repairs-only`)."""
    if s["median_checkpoint_retry_s"] is None and s["median_overhead_percent"] is None:
        return ["checkpoint-retry baseline and fault-free overhead: not measured"]
    return [
        f"checkpoint-retry: median {_number(s['median_checkpoint_retry_s'], 2)} s; in-situ restore is "
        f"{_number(s['median_speedup_replay'], 0)}x faster (replay, median over cases), "
        f"{_number(s['median_speedup_automatic'], 0)}x (automatic)",
        f"fault-free overhead: median {_number(s['median_overhead_percent'], 2)}%, max "
        f"{_number(s['max_overhead_percent'], 2)}%, cases above 1%: {s['cases_over_1_percent']}",
    ]


def text_table(results: dict[str, Any]) -> str:
    rows = [list(COLUMNS)] + [cells(r) for r in results["cases"]]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines + [""] + summary_lines(results["summary"]))


def markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    head = (f"Run of {m['date']} on {m['processor']} ({m['cpus']} CPUs), {m['platform']}, Python {m['python']}, "
            f"torch {m['torch']}; {results['wall_s'] / 60:.1f} minutes.\n")
    lines = [head, "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in cells(r)) + " |" for r in results["cases"]]
    lines += [""] + [f"- {line}" for line in summary_lines(results["summary"])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m DLFailureBenchmark.report", description="Show a run's results.")
    parser.add_argument("--results", type=Path, default=HERE / "results" / "results.json",
                        help="a results.json written by `python -m DLFailureBenchmark` (default: its default --out)")
    parser.add_argument("--plot", type=Path, nargs="?", const=FIGURE, metavar="PNG",
                        help=f"draw restore time vs checkpoint-retry per case (default file: {FIGURE.name} here)")
    options = parser.parse_args(argv)
    try:
        results = json.loads(options.results.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        print(f"cannot read the results {options.results}: {error}", file=sys.stderr)
        return 2
    print(text_table(results))
    if options.plot is not None:
        try:
            from DLFailureBenchmark.figure import draw

            print(f"\nfigure written: {draw(results, options.plot)}")
        except ImportError as missing:
            print(f"--plot needs matplotlib ({missing}): pip install 'daifu[plot]'", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
