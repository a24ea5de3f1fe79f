"""`daifu_workspace/repairs.jsonl`: one JSON object per repair, the machine-readable record.

Every reader of repairs goes through `load`, `all_repairs` and `number_entries`, so `daifu show`,
`daifu report N`, the replay and the demo number and match repairs the same way: by the repair's
own `repair` number and process, never by its line.
"""

from __future__ import annotations

import atexit
import json
import threading
from pathlib import Path
from typing import Any

from daifu import config, ranks
from daifu.state import RUN
from daifu.store.lines import LineFile, read_objects

REPAIRS_FILE = "repairs.jsonl"
PASSED_OVER = "passed over"
"""The `event` of a line that is no repair: what a repair passed over later in the run (`daifu.core.account`)."""

_lock = threading.Lock()


def per_rank(path: Path) -> Path:
    """`path` for this rank: `repairs.rank1.jsonl` in a multi-rank job, else unchanged."""
    number = ranks.rank()
    return path if number is None else path.with_name(f"{path.stem}.rank{number}{path.suffix}")


def repairs_path(workspace: Path | None = None) -> Path:
    """The JSON-lines record of `workspace`, by default the one now in effect (this rank's, in a
    multi-rank job)."""
    return per_rank((workspace or config.settings().workspace) / REPAIRS_FILE)


_open: list[LineFile] = []
"""The file the last line was written to, left open (`LineFile(follow=True)`): a repeated crash's
restore paid more for opening it than for the rest of the record. One only: a process whose workspace
changes (a test suite's) does not gather open files."""


def _target(path: Path) -> LineFile:
    """The open file for `path`, the one left open before when it is the same; called under `_lock`."""
    if _open and _open[0].path == path:
        return _open[0]
    if _open:
        _open.pop().close()
    _open.append(LineFile(path, follow=True))
    return _open[0]


@atexit.register
def _close() -> None:
    """At exit: close the file left open (each of its lines was flushed as it was written)."""
    with _lock:
        if _open:
            _open.pop().close()


def append(item: dict[str, Any], path: Path | None = None) -> None:
    """Record one repair: in memory (`RUN.history`) and as a line of `path` (default `repairs_path()`)."""
    RUN.remember(item)
    line = json.dumps(item, default=str)
    with _lock:
        _target((path or repairs_path()).absolute()).write(line)


def append_event(item: dict[str, Any], path: Path | None = None) -> None:
    """Record a line that is no repair (`item["event"]`): in the file only, never among the repairs."""
    line = json.dumps(item, default=str)
    with _lock:
        _target((path or repairs_path()).absolute()).write(line)


def load(path: Path | None = None) -> list[dict[str, Any]]:
    """The repairs recorded in one JSON-lines file (default: `repairs_path()`), oldest first.

    Only parses: a record is data, and reading it never runs code. Raises `OSError` when the
    file cannot be read, `ValueError` when a line is not a JSON object. Lines that are no repair
    (`events`) are left out.
    """
    return [entry for entry in read_objects(path or repairs_path()) if "event" not in entry]


def events(folder: Path | None = None) -> list[dict[str, Any]]:
    """The lines of every JSON-lines record in `folder` that are no repair (what repairs passed over
    later in the run), oldest first."""
    folder = folder or config.settings().workspace
    found = [entry for path in sorted(folder.glob("repairs*.jsonl")) for entry in read_objects(path)
             if "event" in entry]
    return sorted(found, key=lambda entry: str(entry.get("time", "")))


def all_repairs(folder: Path | None = None) -> list[dict[str, Any]]:
    """The repairs of every JSON-lines record in `folder` (one per rank), in time order."""
    folder = folder or config.settings().workspace
    entries = [entry for path in sorted(folder.glob("repairs*.jsonl")) for entry in load(path)]
    return sorted(entries, key=lambda entry: (str(entry.get("time", "")), entry.get("rank") or 0))


def records_in(path: Path | None) -> list[dict[str, Any]]:
    """The repairs `daifu show` and `daifu report` number: those of one file, or of every rank's file
    in the workspace when `path` is `None` (or names a folder)."""
    if path is None:
        return all_repairs()
    if path.is_dir():
        return all_repairs(path)
    return load(path)
