"""Opening a workspace file in the user's editor ($VISUAL, then $EDITOR)."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path


def editor_command() -> list[str] | None:
    """The editor the user chose, split like a shell would; `None` when neither variable is set."""
    chosen = os.environ.get("VISUAL") or os.environ.get("EDITOR")
    return shlex.split(chosen) if chosen else None


def edit(path: Path) -> str | None:
    """Open `path` in the editor and wait for it; returns why it could not, or `None`."""
    command = editor_command()
    if command is None:
        return f"Neither $VISUAL nor $EDITOR is set: edit {path} in another window."
    try:
        status = subprocess.call([*command, str(path)])
    except OSError as error:
        return f"Cannot start the editor {command[0]!r}: {error}"
    return None if status == 0 else f"The editor {command[0]!r} exited with status {status}."
