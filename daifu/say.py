"""What DaiFu tells the person running the program: one short line on stderr per thing it did.

A repair applied, a bot that fell back, a crash DaiFu declined: each is said as it happens, on
stderr (beside the program's own output and tracebacks), prefixed `DaiFu:`. Nothing DaiFu does to a
run is silent; the record (`daifu.store`) keeps the details.
"""

from __future__ import annotations

import sys

from daifu.state import RUN


def say(message: str) -> None:
    """Print `DaiFu: <message>` on stderr; never fails the run."""
    try:
        print(f"DaiFu: {message}", file=sys.stderr, flush=True)
    except (OSError, ValueError):  # a closed or broken stderr
        pass


def say_once(message: str) -> None:
    """`say(message)`, the first time it is said in this run only."""
    if RUN.first_time(message):
        say(message)
