"""Whether to colour what DaiFu prints, and the few ANSI styles it uses.

Colour goes only to a terminal that can show it: never when `NO_COLOR` is set
(https://no-color.org), nor to a terminal that says it has no colours (`TERM=dumb`, as Emacs
shells and some CI logs set it); a transcript piped to a file or read by a test stays plain text.
"""

from __future__ import annotations

import os
from typing import IO, Any

_STYLES = {"red": "31", "green": "32", "cyan": "36", "bold": "1", "dim": "2"}


def wanted(stream: IO[Any]) -> bool:
    """Colour for `stream`: it is a terminal, not a dumb one, and `NO_COLOR` is unset or empty."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def paint(text: str, style: str, on: bool) -> str:
    """`text` in `style` (red, green, cyan, bold, dim) when `on`, else unchanged."""
    return f"\x1b[{_STYLES[style]}m{text}\x1b[0m" if on else text
