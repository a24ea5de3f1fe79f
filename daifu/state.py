"""What one process accumulates across crashes, in one object with a `reset()`.

Everything DaiFu remembers between crashes of a run lives here, not in module globals, so a test
(or a long-lived process such as a notebook kernel) can start afresh with `RUN.reset()`. What
grows with the run is bounded.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_HISTORY = 1000
"""Repairs kept in memory (`repairs.jsonl` keeps them all)."""


@dataclass
class RunState:
    """The run's memory.

    history: the latest repairs, as written to `repairs.jsonl` (newest last, at most `MAX_HISTORY`);
        `recorded` counts every repair of the run, so `repairs_since(mark)` works after trimming.
    numbers: the last repair number given (`Repair N Begin`).
    replay: the replay in progress (`daifu.decide.replay.Replay`), once one started.
    occurrences: per crash fingerprint, how often this process met it (distributed runs number
        shared decisions by it).
    said: messages given once per run (an ignored broadcast file, why DaiFu declined, no fork).
    focused: surgery files the console's `focus` wrote, whose edits a reopened console keeps.
    watches: per function, the watch of its last automatic repair (`daifu.decide.watch`).
    distrusted: crash sites where automatic repairs stopped, because one did harm or passed over
        more than its budget.
    accounts: per crash site, what its repairs passed over (`daifu.core.account.Account`).
    verified: per crash site, the automatic repair a full trial verified there, which a repeat of the
        same crash re-verifies by a short trial (`daifu.decide.repeat.Verified`).
    conversation: the console's `ask` rounds about the latest crash asked about
        (`daifu.console.ask.Conversation`).
    launcher: the `daifu` command that started the program (`daifu run`), `None` when it started itself:
        what DaiFu tells a person to set fits how they started it (`daifu.decide.hints`).
    """

    history: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_HISTORY))
    recorded: int = 0
    numbers: int = 0
    replay: Any = None
    occurrences: Counter[str] = field(default_factory=Counter)
    said: set[str] = field(default_factory=set)
    focused: set[Path] = field(default_factory=set)
    watches: dict[str, Any] = field(default_factory=dict)
    distrusted: set[tuple[str, str, int]] = field(default_factory=set)
    accounts: dict[tuple[str, str, int], Any] = field(default_factory=dict)
    verified: dict[tuple[str, str, int], Any] = field(default_factory=dict)
    conversation: Any = None
    launcher: str | None = None

    def reset(self) -> None:
        """Forget everything: the next crash is the run's first."""
        fresh = RunState()
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(fresh, name))

    def next_number(self) -> int:
        self.numbers += 1
        return self.numbers

    def remember(self, repair: dict[str, Any]) -> None:
        self.history.append(repair)
        self.recorded += 1

    def repairs_since(self, mark: int) -> list[dict[str, Any]]:
        """The repairs recorded after `recorded` was `mark` (those still kept in memory)."""
        count = max(0, self.recorded - mark)
        return list(self.history)[-count:] if count else []

    def first_time(self, message: str) -> bool:
        """Whether `message` is said now for the first time in this run (and note it as said)."""
        if message in self.said:
            return False
        self.said.add(message)
        return True


RUN = RunState()
