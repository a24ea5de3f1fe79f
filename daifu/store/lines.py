"""Appending lines to a file that other processes and people read while the run goes on.

Each line is written whole and flushed at once (the file is line-buffered), so a reader never sees
half a line and nothing is lost if the process dies. A failure to write never costs the run: the
first `OSError` is reported once, as a warning naming the file, and later lines are dropped.
"""

from __future__ import annotations

import json
import os
import threading
import warnings
from pathlib import Path
from typing import IO, Any

from daifu.state import RUN


class LineFile:
    """One file of lines, opened on the first write (in `mode` "a", or "w" to start it afresh).

    follow: the file stays open between lines, yet each line goes to the file its path names when it
    is written: one removed or replaced since the last line (a person deleting a record, a rotation)
    is opened again there, at the cost of one `stat` call a line, compared with the file it opened
    (opening it for each line cost twenty times that)."""

    def __init__(self, path: Path, mode: str = "a", follow: bool = False) -> None:
        self.path = path
        self._mode = mode
        self._follow = follow
        self._stream: IO[str] | None = None
        self._held: tuple[int, int] = (0, 0)
        """The inode and device of the file `_stream` writes to, read when it was opened."""
        self._lock = threading.Lock()

    def write(self, line: str) -> None:
        """Append `line` (a newline is added)."""
        with self._lock:
            try:
                if self._stream is not None and self._follow and self._moved():
                    self._stream.close()
                    self._stream = None
                if self._stream is None:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    self._stream = open(self.path, self._mode, encoding="utf-8", buffering=1)  # noqa: SIM115
                    if self._follow:
                        held = os.fstat(self._stream.fileno())
                        self._held = held.st_ino, held.st_dev
                self._stream.write(line + "\n")
            except OSError as error:
                if RUN.first_time(f"cannot write {self.path}"):
                    warnings.warn(f"DaiFu cannot write {self.path}: {error}", RuntimeWarning, 3)

    def _moved(self) -> bool:
        """Whether the path no longer names the file the stream writes to (removed, or another file)."""
        try:
            named = os.stat(self.path)
        except OSError:
            return True
        return (named.st_ino, named.st_dev) != self._held

    def close(self) -> None:
        with self._lock:
            if self._stream is not None:
                self._stream.close()
                self._stream = None


def read_objects(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, oldest first, blank lines skipped. Only parses: reading a
    record never runs code. `OSError` when it cannot be read, `ValueError` for a line that is not an object."""
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        item = json.loads(line)
        if not isinstance(item, dict):
            raise ValueError(f"{path} line {number} is not a JSON object")
        found.append(item)
    return found
