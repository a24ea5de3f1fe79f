"""`<workspace>/metrics.jsonl`: the loss (or any measure) a program logs as it trains, for `daifu show --plot`.

A program calls `daifu.log_metric(step, loss)` where it already prints its loss, and
`daifu.log_checkpoint(step)` where it saves a checkpoint. Each call appends one JSON object:

    {"time": 1764500000.123, "step": 12, "name": "loss", "value": 0.53, "repairs": 1, "pid": 4242, "rank": null,
     "started": 1764499995.870}

`repairs` is how many repairs this process had recorded when the line was written, so a figure
places each repair between the last step logged before it and the first logged after it, with no
clock to match. `started` is when the process imported DaiFu (`daifu.IMPORTED_AT`, which the public
`daifu.log_metric` passes down): what a restart pays before its first step (imports, building the
model, loading data) is measured from it; `null` when a caller gives none. A checkpoint line has
`"name": "checkpoint"` and no value. Writing never fails the run (`daifu.store.lines`); in a
multi-rank job each rank writes `metrics.rank<N>.jsonl`.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path
from typing import Any

from daifu import config, ranks
from daifu.state import RUN
from daifu.store.lines import LineFile, read_objects
from daifu.store.repairs import per_rank

METRICS_FILE = "metrics.jsonl"
CHECKPOINT = "checkpoint"

_lock = threading.Lock()
_files: dict[Path, LineFile] = {}


def metrics_path() -> Path:
    """This process's metrics file in the workspace now in effect."""
    return per_rank(config.settings().workspace / METRICS_FILE)


def log_metric(step: int, value: float, name: str = "loss", started: float | None = None) -> None:
    """Note that `name` (default: the loss) was `value` at training step `step`; `started`: when the
    process imported DaiFu.

    `value` may be a number or a one-element tensor; a value that is not finite is kept as `null`
    (JSON has no NaN) so the figure shows the gap.
    """
    number = float(value)
    _append({"step": int(step), "name": name, "value": number if math.isfinite(number) else None}, started)


def log_checkpoint(step: int, started: float | None = None) -> None:
    """Note that a checkpoint holding the state of training step `step` was saved: a restart would resume there."""
    _append({"step": int(step), "name": CHECKPOINT}, started)


def _append(item: dict[str, Any], started: float | None) -> None:
    line = {"time": round(time.time(), 3), **item, "repairs": RUN.recorded, "pid": os.getpid(),
            "rank": ranks.rank(), "started": round(started, 3) if started is not None else None}  # fmt: skip
    path = metrics_path().absolute()
    with _lock:
        target = _files.get(path)
        if target is None:
            target = _files[path] = LineFile(path)
    target.write(json.dumps(line))


def load(path: Path) -> list[dict[str, Any]]:
    """The lines of one metrics file, oldest first; a line that is not a JSON object is an error (`ValueError`)."""
    return read_objects(path)
