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

A script that logs no metrics (run unedited, `daifu run train.py`) is drawn from what DaiFu
recorded itself: the last process's repairs over time, the loss values the crashed frame held at
each (`losses` in `repairs.jsonl`: its scalar locals named like a loss) and each restore time.

Drawn with matplotlib (the `daifu[plot]` extra), headless (Agg). `figure` builds the figure (its
artists hold the data drawn), `draw` writes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daifu.store import metrics

REPAIR_RED = "#c92a2a"


class NothingToPlot(Exception):
    """The workspace has neither metrics nor repairs to draw; the message says what the program should call."""


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


def last_process(repairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The repairs of the process (and rank) that recorded the last one, in order."""
    if not repairs:
        return []
    last = repairs[-1]
    return [r for r in repairs if r.get("pid") == last.get("pid") and r.get("rank") == last.get("rank")]


def draw(workspace: Path, repairs: list[dict[str, Any]], path: Path) -> Path:
    """Write the figure of the last run in `workspace` to `path` (PNG, SVG or PDF by its suffix)."""
    import matplotlib.pyplot as plt

    drawn = figure(workspace, repairs)
    path.parent.mkdir(parents=True, exist_ok=True)
    drawn.savefig(path, dpi=110)
    plt.close(drawn)
    return path


def figure(workspace: Path, repairs: list[dict[str, Any]]) -> Any:
    """The figure of the last run in `workspace`: from its metrics, else from its repairs alone
    (`NothingToPlot` when it has neither)."""
    import matplotlib

    matplotlib.use("Agg")
    try:
        run = last_run(workspace)
    except NothingToPlot as no_metrics:
        own = last_process(repairs)
        if not own:
            raise NothingToPlot(f"no repairs and {no_metrics}") from None
        return _repairs_figure(own)
    return _metrics_figure(run, place(run, repairs))


def _metrics_figure(run: list[dict[str, Any]], placed: list[Repair]) -> Any:
    import matplotlib.pyplot as plt

    drawn, (curve, costs) = plt.subplots(
        2, 1, figsize=(8, 6.5), gridspec_kw={"height_ratios": [3, max(1, len(placed))]}
    )
    for name in dict.fromkeys(line["name"] for line in run if line.get("name") != metrics.CHECKPOINT):
        points = [(line["step"], line["value"]) for line in run if line.get("name") == name]
        curve.plot([s for s, _ in points], [float("nan") if v is None else v for _, v in points], label=name)
    for repair in placed:
        _mark(curve, repair.step, f"#{repair.number} {repair.decision}{_restore(repair.restore_ms)}")
    saved = [line["step"] for line in run if line.get("name") == metrics.CHECKPOINT]
    if saved:
        curve.plot(saved, [0] * len(saved), "^", color="#495057", transform=curve.get_xaxis_transform(),
                   clip_on=False, label="checkpoint")  # fmt: skip
    curve.set_xlabel("step")
    curve.set_title(f"Run {run[0].get('pid')}: {_count(len(placed), 'repair')} in place", fontsize=10)
    curve.legend(fontsize=8)
    _costs(costs, placed)
    drawn.tight_layout()
    return drawn


def _repairs_figure(own: list[dict[str, Any]]) -> Any:
    """A run with no metrics: the losses its crashed frames held at each repair, over time, each repair
    marked; below, each restore time."""
    import matplotlib.pyplot as plt

    drawn, (curve, restores) = plt.subplots(
        2, 1, figsize=(8, 6.5), gridspec_kw={"height_ratios": [3, max(1, len(own))]}
    )
    places = range(1, len(own) + 1)  # in order; their times (to the second) are the ticks' labels
    names = list(dict.fromkeys(name for repair in own for name in (repair.get("losses") or {})))
    for name in names:
        points = [(at, repair["losses"][name]) for at, repair in zip(places, own) if name in (repair.get("losses") or {})]
        curve.plot([at for at, _ in points], [float("nan") if v is None else v for _, v in points], "o-",
                   label=f"{name} (in the crashed frame)")  # fmt: skip
    for at, repair in zip(places, own):
        _mark(curve, at, f"#{repair.get('repair')} {repair.get('decision', '?')}{_restore(repair.get('duration_ms'))}")
    curve.set_xlim(0.5, len(own) + 0.5)
    curve.set_xticks(list(places), [f"#{r.get('repair')}\n{_clock(r)}" for r in own], fontsize=8)
    if names:
        curve.legend(fontsize=8)
    else:
        curve.set_yticks([])
        curve.text(0.5, 0.5, "no scalar named like a loss in the crashed frames\n"
                             "(daifu.log_metric(step, loss) draws the whole curve)",
                   ha="center", va="center", transform=curve.transAxes, fontsize=9, color="#495057")  # fmt: skip
    curve.set_xlabel("repair, at")
    curve.set_title(f"Run {own[0].get('pid')}: {_count(len(own), 'repair')} in place "
                    "(no metrics logged: what DaiFu recorded at each)", fontsize=10)  # fmt: skip
    _restores(restores, own)
    drawn.tight_layout()
    return drawn


def _mark(axes: Any, x: Any, label: str) -> None:
    """A repair at `x`: a dashed vertical line, its label written down along it from just inside the top."""
    axes.axvline(x, color=REPAIR_RED, linestyle="--", linewidth=1)
    axes.annotate(label, (x, 1), xycoords=("data", "axes fraction"), xytext=(-2, -4), textcoords="offset points",
                  rotation=90, rotation_mode="anchor", ha="right", va="bottom", fontsize=8,
                  color=REPAIR_RED)  # fmt: skip


def _restores(axes: Any, own: list[dict[str, Any]]) -> None:
    for row, repair in enumerate(own):
        milliseconds = repair.get("duration_ms")
        seconds = float(milliseconds) / 1000.0 if milliseconds is not None else 0.0
        axes.barh(row, seconds, height=0.6, color="#2b8a3e", label="DaiFu: restored in place" if row == 0 else None)
        text = f" {float(milliseconds):.0f} ms" if milliseconds is not None else " not repaired"
        axes.text(seconds if milliseconds is not None else 1e-3, row, text, va="center", fontsize=7)
    axes.set_xscale("log")
    longest = max((float(r["duration_ms"]) / 1000.0 for r in own if r.get("duration_ms") is not None), default=1e-3)
    axes.set_xlim(left=min(1e-3, longest / 10), right=max(longest, 1e-3) * 4)  # room for the labels
    axes.set_yticks(range(len(own)), [f"#{r.get('repair')} {r.get('decision', '?')}" for r in own], fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("restore time, seconds (log scale)")


def _clock(repair: dict[str, Any]) -> str:
    """The time of day a repair was recorded (`repairs.jsonl`'s `time`: `2026-12-01T23:38:56+0000`)."""
    return str(repair.get("time", ""))[11:19]


def _restore(milliseconds: float | None) -> str:
    return f", {milliseconds:.0f} ms" if milliseconds is not None else ", not repaired"


def _count(number: int, noun: str) -> str:
    """`1 repair`, `2 repairs`."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


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
        axes.text(total, row + 0.2, f" {total:.1f} s ({_count(repair.redo_steps, 'step')} redone)", va="center",
                  fontsize=7)
    axes.set_xscale("log")
    longest = max(r.startup_s + r.redo_s for r in placed)
    axes.set_xlim(right=max(longest, 1e-3) * 4)  # room for the labels
    axes.set_yticks(range(len(placed)), [f"#{r.number} {r.decision}" for r in placed], fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("seconds (log scale)")
    axes.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, frameon=False)
