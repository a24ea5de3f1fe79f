"""The workspace files of a repair: `(surgery-N)<func>.py`, `(action-N)<func>.py`, `N.broadcast`, and
DaiFu's own `(patch-N)<qualname>.py` (the console's `patch`).

The names are the prototype's, which its users and benchmark scripts rely on; N is the repair
number of the record (`Repair N Begin`). The folder is `settings().workspace`, read on each call
so that `configure(workspace=...)` and `DAIFU_WORKSPACE` apply at once.
"""

from __future__ import annotations

import os
from pathlib import Path

from daifu import config


def folder() -> Path:
    """The workspace folder now in effect (it may not exist yet)."""
    return config.settings().workspace


def surgery_file(number: int, function_name: str) -> Path:
    """Where the source to edit for repair `number` lives."""
    return folder() / f"(surgery-{number}){function_name}.py"


def action_file(number: int, function_name: str) -> Path:
    """Where the code to run in the faulty frame for repair `number` lives."""
    return folder() / f"(action-{number}){function_name}.py"


def patch_file(number: int, qualname: str) -> Path:
    """Where the source of a called function to patch for repair `number` lives (`Net.forward`)."""
    return folder() / f"(patch-{number}){qualname}.py"


def broadcast_file(number: int) -> Path:
    """Where repair `number` is saved for other processes to apply."""
    return folder() / f"{number}.broadcast"


def write(path: Path, text: str) -> None:
    """Write `text` to `path` whole: a reader (another process, the replay) never sees half a file.

    Raises `OSError`; the callers say so to the user, since these files are what they asked for.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)
