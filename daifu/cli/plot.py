"""`daifu show --plot`: a run's loss curve with its repairs marked, beside what restarts would have cost.

The data are the workspace's own files: `metrics*.jsonl`, which the program writes through
`daifu.log_metric(step, loss)` and `daifu.log_checkpoint(step)` (`daifu.store.metrics`), and the
repairs of the record. The run drawn is the last process that logged metrics there.

Top: the logged values against the step, each repair a vertical line between the last step logged
before it and the first after it (labelled with its number, decision and restore time), each
checkpoint a tick on the axis. Bottom, per repair, on a log scale: DaiFu's restore time against
what a restart from the last checkpoint before the crash would have cost: this run's own start-up
(from importing DaiFu to its first logged step: imports, building the model, loading data) plus
the training it would redo (from that checkpoint, or from the first step when none was logged, to
the crash), both from the metric lines' own times. Loading the checkpoint is not counted: the
restart bar is a lower bound.

Drawn with matplotlib (the `daifu[plot]` extra), headless (Agg).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daifu.store import metrics


class NothingToPlot(Exception):
    """The workspace has no metrics to draw; the message says what the program should call."""


@dataclass(frozen=True)
class Repair:
    """One repair placed on the run's steps, and what a restart would have redone instead."""

    number: int
    decision: str
    restore_ms: float | None
    step: float
    startup_s: float
    redo_s: float
    redo_steps: int


def last_run(workspace: Path) -> list[dict[str, Any]]:
    """The metric lines of the last process that logged any in `workspace`, in order."""
    lines = [line for path in sorted(workspace.glob("metrics*.jsonl")) for line in metrics.load(path)]
    if not lines:
        raise NothingToPlot(
            f"no metrics in {workspace}: call daifu.log_metric(step, loss) in the training loop "
            "(and daifu.log_checkpoint(step) where it saves one)"
        )
    last = max(lines, key=lambda line: float(line.get("time", 0)))
    return [line for line in lines if line.get("pid") == last.get("pid") and line.get("rank") == last.get("rank")]


def place(run: list[dict[str, Any]], repairs: list[dict[str, Any]]) -> list[Repair]:
    """Each repair of the run's process, on its steps, with the work a restart would have redone."""
    values = [line for line in run if line.get("name") != metrics.CHECKPOINT]
    pid, rank = run[0].get("pid"), run[0].get("rank")
    own = [r for r in repairs if r.get("pid") == pid and r.get("rank") == rank]
    placed = []
    for number, repair in enumerate(own, 1):
        before = [line for line in values if int(line.get("repairs", 0)) < number]
        after = [line for line in values if int(line.get("repairs", 0)) >= number]
        if not before and not after:
            continue
        low = before[-1] if before else after[0]
        high = after[0] if after else before[-1]
        saved = [c for c in run if c.get("name") == metrics.CHECKPOINT and int(c.get("repairs", 0)) < number]
        start = saved[-1] if saved else values[0]
        placed.append(
            Repair(
                number=number,
                decision=str(repair.get("decision", "?")),
                restore_ms=repair.get("duration_ms"),
                step=(float(low["step"]) + float(high["step"])) / 2,
                startup_s=max(0.0, float(values[0]["time"]) - float(values[0].get("started", values[0]["time"]))),
                redo_s=max(0.0, float(low["time"]) - float(start["time"])),
                redo_steps=max(0, int(low["step"]) - int(start["step"])),
            )
        )
    return placed


def draw(workspace: Path, repairs: list[dict[str, Any]], path: Path) -> Path:
    """Write the figure of the last run in `workspace` to `path` (PNG, SVG or PDF by its suffix)."""
    run = last_run(workspace)
    placed = place(run, repairs)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (curve, costs) = plt.subplots(
        2, 1, figsize=(8, 6.5), gridspec_kw={"height_ratios": [3, max(1, len(placed))]}
    )
    for name in dict.fromkeys(line["name"] for line in run if line.get("name") != metrics.CHECKPOINT):
        points = [(line["step"], line["value"]) for line in run if line.get("name") == name]
        curve.plot([s for s, _ in points], [float("nan") if v is None else v for _, v in points], label=name)
    for repair in placed:
        curve.axvline(repair.step, color="#c92a2a", linestyle="--", linewidth=1)
        restore = f", {repair.restore_ms:.0f} ms" if repair.restore_ms is not None else ""
        curve.annotate(f"#{repair.number} {repair.decision}{restore}", (repair.step, 1),
                       xycoords=("data", "axes fraction"), rotation=90, va="top", ha="right", fontsize=8,
                       color="#c92a2a")  # fmt: skip
    saved = [line["step"] for line in run if line.get("name") == metrics.CHECKPOINT]
    if saved:
        curve.plot(saved, [0] * len(saved), "^", color="#495057", transform=curve.get_xaxis_transform(),
                   clip_on=False, label="checkpoint")  # fmt: skip
    curve.set_xlabel("step")
    curve.set_title(f"Run {run[0].get('pid')}: {len(placed)} repairs in place", fontsize=10)
    curve.legend(fontsize=8)
    _costs(costs, placed)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _costs(axes: Any, placed: list[Repair]) -> None:
    if not placed:
        axes.set_axis_off()
        axes.text(0.5, 0.5, "no repair in this run", ha="center", va="center", transform=axes.transAxes)
        return
    for row, repair in enumerate(placed):
        first = row == 0
        restore_s = (repair.restore_ms or 0.0) / 1000.0
        axes.barh(row - 0.2, restore_s, height=0.38, color="#2b8a3e", label="DaiFu: in place" if first else None)
        axes.barh(row + 0.2, repair.startup_s, height=0.38, color="#ffa8a8",
                  label="restart: this run's start-up to its first step" if first else None)  # fmt: skip
        axes.barh(row + 0.2, repair.redo_s, left=repair.startup_s, height=0.38, color="#c92a2a",
                  label="restart: training redone since the last checkpoint" if first else None)  # fmt: skip
        axes.text(restore_s, row - 0.2, f" {restore_s * 1000:.0f} ms", va="center", fontsize=7)
        total = repair.startup_s + repair.redo_s
        axes.text(total, row + 0.2, f" {total:.1f} s ({repair.redo_steps} steps redone)", va="center", fontsize=7)
    axes.set_xscale("log")
    longest = max(r.startup_s + r.redo_s for r in placed)
    axes.set_xlim(right=max(longest, 1e-3) * 4)  # room for the labels
    axes.set_yticks(range(len(placed)), [f"#{r.number} {r.decision}" for r in placed], fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("seconds (log scale)")
    axes.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, frameon=False)
