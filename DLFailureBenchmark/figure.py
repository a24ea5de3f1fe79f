"""The benchmark's results as a picture: DaiFu's restore time against a checkpoint restart, per case.

One row per case, on a logarithmic time axis (milliseconds): the in-situ restore of the replayed
repair, the restore of the rules bot's repair when it recovered the run, and the checkpoint-retry
baseline (a new process that rebuilds, loads the last checkpoint and redoes the lost steps). The
gap between the bars is the speed-up the table's `speed-up` column gives in numbers.

Drawn with matplotlib (the `daifu[plot]` extra), headless (Agg), from `results.json` only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SERIES = (
    ("in situ, replayed repair", "#2b8a3e"),
    ("in situ, rules bot", "#74b816"),
    ("checkpoint-retry", "#c92a2a"),
)


def times_ms(row: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
    """(replay restore, automatic restore when it recovered, checkpoint-retry) of one case, in ms."""
    replay = row["replay"]["restore_ms"] if row["replay"]["recovered"] else None
    automatic = row["automatic"]["restore_ms"] if row["automatic"]["recovered"] else None
    retry_s = row["baseline"].get("median_s")
    return replay, automatic, retry_s * 1000.0 if retry_s else None


def draw(results: dict[str, Any], path: Path) -> Path:
    """Write the figure of `results` (as `results.json` holds them) to `path` (PNG or SVG); returns it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["cases"]
    height = 0.27
    figure, axes = plt.subplots(figsize=(9, 1.2 + 0.33 * len(rows)))
    for index, (label, colour) in enumerate(SERIES):
        positions = [n + (index - 1) * height for n in range(len(rows))]
        values = [times_ms(row)[index] for row in rows]
        shown = [(p, v) for p, v in zip(positions, values) if v]
        axes.barh([p for p, _ in shown], [v for _, v in shown], height=height, color=colour, label=label)
    axes.set_xscale("log")
    axes.set_yticks(range(len(rows)), [row["id"] for row in rows], fontsize=7)
    axes.invert_yaxis()
    axes.set_xlabel("time to get the run going again (ms, log scale)")
    machine = results.get("machine", {})
    axes.set_title(
        f"DLFailureBenchmark: in-situ restore vs checkpoint-retry ({len(rows)} cases, {machine.get('date', '')}, "
        f"{machine.get('cpus', '?')} CPUs)",
        fontsize=9,
    )
    axes.grid(axis="x", which="both", alpha=0.25)
    axes.legend(loc="lower right", fontsize=7)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
