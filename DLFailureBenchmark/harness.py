"""The benchmark's harness: every case run fixed, buggy, replayed and repaired by the bot, and the baseline.

For each case, each in its own process:

1. `fixed`, plain: the reference result;
2. `buggy`, plain: it must crash with the expected exception; its step at the crash and its last
   checkpoint are kept;
3. `buggy`, vaccinated, `mode="replay"`: the case's recorded repairs re-applied;
4. `buggy`, vaccinated, `mode="automatic"`, `approve="auto"`, asking one rules repair bot that the
   harness serves on a loopback port for the whole run;
5. the checkpoint-retry baseline, timed from outside: a new process that imports the fixed program,
   rebuilds, loads the buggy run's last checkpoint and redoes the lost steps up to the crash step;
6. the fault-free overhead: the fixed program plain and vaccinated in one process, interleaved.

With `REPAIRS_ONLY` (`--repairs-only`) only 1-4 run; rows keep `baseline` and `overhead` with None.
With `REPLAY_ONLY` (`--replay-only`) only 1-3 run: no bot is started or asked, and the automatic
run's outcome is None (a blind case's first automatic run is its figure: see the README).

Each replay and automatic run has one outcome (`outcome`):

- recovered: it finished with the fixed run's number of steps, its metric within the case's
  tolerance of the fixed run's, and every harm check of the case passes (`harm_failures`);
- harmful: it finished (returned a result) but fails that comparison or a harm check;
- declined: no repair was applied and the expected crash propagated, as without DaiFu;
- failed: a repair was applied but the run still ended with an exception (or the run ended with
  another exception than the expected one, or did not report back at all).

The restore time is DaiFu's own record (`duration_ms`: from the exception to the resumed
statement), summed over the run's repairs.

The repair effort of the automatic run is read from its workspace record,
`daifu_workspace/repairs.jsonl`, when DaiFu writes trials there: each entry (one repair) may
carry `"trials": [{"decision": str, "verdict": str, "ms": float}, ...]`, the candidates it
tried in a sandbox before applying one (`effort`). Without that field the effort is unknown.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from DLFailureBenchmark.cases import SETS, Case

ROOT = Path(__file__).resolve().parent.parent
HEAVY_FAMILIES = {"resnet", "vit", "gpt2", "llama"}
"""Families whose runs take long enough that the overhead is measured with `Plan.large_overhead_pairs`
(as is every program of the realistic set: full programs of tens of seconds each)."""


@dataclass(frozen=True)
class Plan:
    """How much to measure: repeats of the baseline, overhead pairs, and the time limit of one run."""

    baseline_repeats: int = 2
    overhead_pairs: int = 4
    large_overhead_pairs: int = 1
    timeout_s: float = 600.0
    repairs_only: bool = False
    """Measure only the repair flows (fixed, buggy, replay, automatic): no baseline, no overhead measure."""
    replay_only: bool = False
    """Run only fixed, buggy and replay: the repair bot is never started nor asked."""


QUICK = Plan(baseline_repeats=1, overhead_pairs=2, large_overhead_pairs=1)
SMOKE = Plan(baseline_repeats=1, overhead_pairs=0, large_overhead_pairs=0)
"""The test suite's check that the harness works end to end: no overhead measure (0 pairs)."""
REPAIRS_ONLY = Plan(baseline_repeats=0, overhead_pairs=0, large_overhead_pairs=0, repairs_only=True)
"""What the repair flows do, and nothing else: the baseline and overhead keys stay, with None."""
REPLAY_ONLY = Plan(baseline_repeats=0, overhead_pairs=0, large_overhead_pairs=0, repairs_only=True, replay_only=True)
"""The recorded human repairs only (fixed, buggy, replay): checks a case without any automatic run."""
OUTCOMES = ("recovered", "harmful", "declined", "failed")


class Runs:
    """Starts the runner processes of one benchmark run, each in a fresh folder under `root`."""

    def __init__(self, root: Path, bot_url: str | None, plan: Plan) -> None:
        self.root, self.bot_url, self.plan = root, bot_url, plan

    def folder(self, case: Case, name: str) -> Path:
        """The folder of the run `name` of `case` (its `work/`, `daifu_workspace/`, `result.json`)."""
        return self.root / case.id / name

    def run(self, case: Case, name: str, variant: str, mode: str, *extra: str,
            env: dict[str, str] | None = None) -> tuple[dict[str, Any], float]:
        """One process; its JSON result and its wall time in seconds."""
        folder = self.folder(case, name)
        shutil.rmtree(folder, ignore_errors=True)
        workspace = folder / "daifu_workspace"
        workspace.mkdir(parents=True)
        if mode == "replay":
            shutil.copy(case.record, workspace / "repairs.jsonl")
        out = folder / "result.json"
        variables = dict(os.environ, PYTHONPATH=_pythonpath(), DAIFU_MODE=mode, DAIFU_WORKSPACE=str(workspace),
                         DAIFU_RECORD=str(folder / "experiment_record.log"), PYTHONHASHSEED="0", **(env or {}))
        for name_ in ("DAIFU_APPROVE", "DAIFU_REPAIRBOT_URL", "DAIFU_MAX_ATTEMPTS"):
            variables.pop(name_, None)
        if mode == "automatic":
            variables.update(DAIFU_APPROVE="auto", DAIFU_REPAIRBOT_URL=self.bot_url or "")
        command = [sys.executable, "-m", "DLFailureBenchmark.runner", "--case", str(case.folder), "--variant",
                   variant, "--workdir", str(folder / "work"), "--out", str(out), *extra]
        started = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, env=variables, capture_output=True, text=True,
                              timeout=self.plan.timeout_s, check=False)
        elapsed = time.perf_counter() - started
        if done.returncode != 0 or not out.exists():
            return {"finished": False, "error": f"runner exited {done.returncode}: {done.stderr[-3000:]}"}, elapsed
        return json.loads(out.read_text(encoding="utf-8")), elapsed


def _pythonpath() -> str:
    return os.pathsep.join([str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])


def crashed_as_expected(case: Case, result: dict[str, Any]) -> bool:
    error = result.get("exception")
    if not error:
        return False
    return case.expected_exception in error["types"] and re.search(case.expected_message, error["message"]) is not None


def matches(case: Case, reference: dict[str, Any] | None, result: dict[str, Any]) -> tuple[bool, float | None]:
    """Whether `result` finished with the reference's steps and its metric within tolerance; and the metric."""
    metrics = result.get("metrics") if result.get("finished") else None
    if not metrics or not reference:
        return False, None
    metric, tolerance = case.compare["metric"], float(case.compare["tolerance"])
    value, expected = float(metrics[metric]), float(reference[metric])
    allowed = tolerance * abs(expected) if case.compare.get("relative") else tolerance
    return (abs(value - expected) <= allowed and metrics.get("steps") == reference.get("steps")), value


def harm_failures(case: Case, metrics: dict[str, Any] | None) -> list[str]:
    """The case's harm checks that `metrics` fails, each said in words (none when all pass).

    A check is `{"metric": key, "min": bound}` or `{"metric": key, "max": bound}` (or both); a
    metric that is missing or not a finite number fails it.
    """
    failures = []
    for check in case.harm_checks:
        key = check["metric"]
        value = (metrics or {}).get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            failures.append(f"{key} is {value!r}, not a finite number")
            continue
        if "min" in check and value < check["min"]:
            failures.append(f"{key} = {value:g} < {check['min']:g}")
        if "max" in check and value > check["max"]:
            failures.append(f"{key} = {value:g} > {check['max']:g}")
    return failures


def outcome(case: Case, reference: dict[str, Any] | None, result: dict[str, Any]) -> str:
    """recovered, harmful, declined or failed (module docstring) for one replay or automatic run."""
    if result.get("finished"):
        recovered, _ = matches(case, reference, result)
        return "recovered" if recovered and not harm_failures(case, result.get("metrics")) else "harmful"
    if not applied_repairs(result) and crashed_as_expected(case, result):
        return "declined"
    return "failed"


def applied_repairs(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's repairs that were carried out: its record also lists the crashes answered `Raise`."""
    return [r for r in result.get("repairs") or [] if r.get("decision") not in (None, "Raise")]


def restore_ms(result: dict[str, Any]) -> float | None:
    """DaiFu's restore time for the run: the sum over its repairs (None when nothing was resumed)."""
    durations = [r["duration_ms"] for r in result.get("repairs") or [] if r.get("duration_ms") is not None]
    return round(sum(durations), 3) if durations else None


def read_record(path: Path) -> list[dict[str, Any]]:
    """The entries of a `repairs.jsonl` (none when the file is missing); a line that is not JSON is skipped."""
    if not path.exists():
        return []
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(entry, dict):
            entries.append(entry)
    return entries


def effort(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What the run's repairs cost in candidates tried, trials and time; None when no entry records trials.

    Reads each entry's optional `trials` list (`{"decision", "verdict", "ms"}` each): candidates are
    the distinct decisions tried for one repair, summed over repairs; trials, every trial; time to
    repair, the repairs' `duration_ms` (crash to resume, trials included); trial ms, the trials' own.
    """
    tried = [e for e in entries if isinstance(e.get("trials"), list)]
    if not tried:
        return None
    trials = [t for e in tried for t in e["trials"] if isinstance(t, dict)]
    return {
        "candidates": sum(len({str(t.get("decision")) for t in e["trials"] if isinstance(t, dict)}) for e in tried),
        "trials": len(trials),
        "repair_ms": round(sum(float(e.get("duration_ms") or 0.0) for e in tried), 3),
        "trial_ms": round(sum(float(t.get("ms") or 0.0) for t in trials), 3),
        "verdicts": [str(t.get("verdict")) for t in trials],
    }


def measure(case: Case, runs: Runs) -> dict[str, Any]:
    """Every measurement of one case, as one row of the results."""
    row: dict[str, Any] = {"id": case.id, "set": case.set, "scenario": case.scenario, "family": case.family}
    fixed, _ = runs.run(case, "fixed", "fixed", "off")
    reference = fixed.get("metrics") if fixed.get("finished") else None
    row["fixed_metric"] = reference.get(case.compare["metric"]) if reference else None
    row["fixed_error"] = None if reference else (fixed.get("error") or fixed.get("exception"))
    buggy, _ = runs.run(case, "buggy", "buggy", "off")
    row["crashed_as_expected"] = crashed_as_expected(case, buggy)
    error = buggy.get("exception") or {}
    row["exception"] = f"{error.get('type', '-')}: {str(error.get('message', buggy.get('error', '')))[:160]}"
    row["crash_step"] = buggy.get("crash_step")
    row["total_steps"] = reference.get("steps") if reference else None
    row["progress"] = (round(row["crash_step"] / row["total_steps"], 3)
                       if row["crash_step"] is not None and row["total_steps"] else None)
    row["fixed_harm_failures"] = harm_failures(case, reference) if reference else None
    for mode in ("replay", "automatic"):
        if mode == "automatic" and runs.plan.replay_only:
            row[mode] = {"finished": False, "recovered": False, "outcome": None, "metric": None, "restore_ms": None,
                         "repairs": [], "error": None, "harm_failures": [], "skipped": "--replay-only"}
            continue
        result, _ = runs.run(case, mode, "buggy", mode)
        _, value = matches(case, reference, result)
        verdict = outcome(case, reference, result)
        row[mode] = {
            "finished": bool(result.get("finished")), "recovered": verdict == "recovered", "outcome": verdict,
            "metric": value, "restore_ms": restore_ms(result) if result.get("finished") else None,
            "repairs": [{k: r.get(k) for k in ("decision", "decided_by", "duration_ms", "line", "exception_type")}
                        for r in result.get("repairs") or []],
            "error": None if result.get("finished") else _failure(result),
            "harm_failures": harm_failures(case, result.get("metrics")) if result.get("finished") else [],
        }
    row["automatic"]["effort"] = (None if runs.plan.replay_only else
                                  effort(read_record(runs.folder(case, "automatic") / "daifu_workspace" /
                                                     "repairs.jsonl")))
    if runs.plan.repairs_only:
        row["baseline"] = {"median_s": None, "skipped": "--repairs-only"}
    else:
        row["baseline"] = baseline(case, runs, buggy)
    row["overhead"] = overhead(case, runs) if runs.plan.overhead_pairs else {"median_percent": None}
    replay_ms = row["replay"]["restore_ms"]
    base_s = row["baseline"].get("median_s")
    row["speedup"] = round(base_s * 1000.0 / replay_ms, 1) if replay_ms and base_s else None
    auto_ms = row["automatic"]["restore_ms"]
    row["speedup_automatic"] = round(base_s * 1000.0 / auto_ms, 1) if auto_ms and base_s else None
    return row


def _failure(result: dict[str, Any]) -> str | None:
    """Why a run did not finish: the runner's own failure, or the exception the program ended with."""
    return result.get("error") or (result.get("exception") or {}).get("type")


def baseline(case: Case, runs: Runs, buggy: dict[str, Any]) -> dict[str, Any]:
    """Checkpoint-retry: restart, rebuild, load the last checkpoint, redo the steps up to the crash."""
    step = buggy.get("crash_step")
    if step is None:
        return {"median_s": None, "error": "the buggy run did not report its crash step"}
    checkpoint = buggy.get("checkpoint")
    extra = ["--until", str(step)] + (["--resume", checkpoint] if checkpoint else [])
    times, resumed_from = [], 0
    for index in range(runs.plan.baseline_repeats):
        result, elapsed = runs.run(case, f"baseline-{index}", "fixed", "off", *extra, env={"DLFB_NO_FAULTS": "1"})
        if not result.get("finished"):
            return {"median_s": None, "error": result.get("error") or result.get("exception")}
        times.append(elapsed)
        resumed_from = step - int(result["metrics"]["steps"])
    return {"median_s": round(statistics.median(times), 3), "times_s": [round(t, 3) for t in times],
            "checkpoint_step": resumed_from, "redone_steps": step - resumed_from}


def overhead(case: Case, runs: Runs) -> dict[str, Any]:
    heavy = case.scenario == "large_model" or case.family in HEAVY_FAMILIES or case.set == "realistic"
    pairs = runs.plan.large_overhead_pairs if heavy else runs.plan.overhead_pairs
    result, _ = runs.run(case, "overhead", "fixed", "off", "--overhead", str(pairs))
    if "ratios" not in result:
        return {"median_percent": None, "error": result.get("error")}
    return {"median_percent": round(100.0 * (statistics.median(result["ratios"]) - 1.0), 3),
            "plain_s": statistics.median(result["plain_s"]), "pairs": pairs}


@contextmanager
def rules_bot() -> Iterator[str]:
    """One embedded rules repair bot on a free loopback port, for every automatic run."""
    from repairbot.server import start_in_thread

    url, stop = start_in_thread(backend="rules", port=0)
    try:
        yield url
    finally:
        stop()


def machine() -> dict[str, Any]:
    import torch

    return {"date": time.strftime("%Y-%m-%d"), "python": platform.python_version(), "torch": torch.__version__,
            "platform": platform.platform(), "processor": _cpu_name(), "cpus": os.cpu_count()}


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_all(selected: list[Case], plan: Plan, workdir: Path | None,
            progress: Callable[[int, int, str, float], None]) -> dict[str, Any]:
    """Measure `selected`; the results as written to results.json."""
    root = workdir or Path(tempfile.mkdtemp(prefix="dlfb-"))
    started = time.perf_counter()
    rows = []
    with nullcontext(None) if plan.replay_only else rules_bot() as url:
        runs = Runs(root, url, plan)
        for index, case in enumerate(selected):
            progress(index, len(selected), case.id, time.perf_counter() - started)
            rows.append(measure(case, runs))
        progress(len(selected), len(selected), "done", time.perf_counter() - started)
    if workdir is None:
        shutil.rmtree(root, ignore_errors=True)
    return {"machine": machine(), "plan": plan.__dict__, "wall_s": round(time.perf_counter() - started, 1),
            "summary": summarize(rows), "cases": rows}


def per_set(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The counts of each set present in `rows`, in the order of `SETS`: generalisation is read set by set.

    `automatic_outcomes` counts the automatic runs by outcome (`OUTCOMES`); a run not made
    (`--replay-only`) is in none of them.
    """
    counts: dict[str, dict[str, Any]] = {}
    for name in SETS:
        members = [r for r in rows if r.get("set", "tuned") == name]
        if members:
            outcomes = [r["automatic"].get("outcome") for r in members]
            counts[name] = {
                "cases": len(members),
                "crashed_as_expected": sum(r["crashed_as_expected"] for r in members),
                "recovered_replay": sum(r["replay"]["recovered"] for r in members),
                "recovered_automatic": sum(r["automatic"]["recovered"] for r in members),
                "finished_off_automatic": sum(r["automatic"]["finished"] and not r["automatic"]["recovered"]
                                              for r in members),
                "automatic_outcomes": {kind: outcomes.count(kind) for kind in OUTCOMES},
            }
    return counts


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def median(values: list[float | None]) -> float | None:
        present = [v for v in values if v is not None]
        return round(statistics.median(present), 3) if present else None

    overheads = [r["overhead"]["median_percent"] for r in rows if r["overhead"]["median_percent"] is not None]
    return {
        "cases": len(rows),
        "crashed_as_expected": sum(r["crashed_as_expected"] for r in rows),
        "recovered_replay": sum(r["replay"]["recovered"] for r in rows),
        "recovered_automatic": sum(r["automatic"]["recovered"] for r in rows),
        "automatic_not_run": sum(bool(r["automatic"].get("skipped")) for r in rows),
        "median_restore_ms_replay": median([r["replay"]["restore_ms"] for r in rows]),
        "max_restore_ms_replay": max((r["replay"]["restore_ms"] or 0.0 for r in rows), default=None),
        "median_restore_ms_automatic": median([r["automatic"]["restore_ms"] for r in rows]),
        "median_checkpoint_retry_s": median([r["baseline"].get("median_s") for r in rows]),
        "median_speedup_replay": median([r["speedup"] for r in rows]),
        "median_speedup_automatic": median([r["speedup_automatic"] for r in rows]),
        "median_overhead_percent": median(overheads),
        "max_overhead_percent": max(overheads, default=None),
        "cases_over_1_percent": sum(o > 1.0 for o in overheads),
        "sets": per_set(rows),
    }
