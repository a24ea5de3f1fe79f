"""What the runtime needs from the layers above it, and what they hand back: the core's contract with them.

The runtime (`daifu.core.resume`) knows nothing of who decides or where repairs are recorded. For
each crash it asks a `Handling` (`daifu.vaccinate` gives one) for the settings to handle it under, a
record entry, and decisions. What the deciders add to a crash travels in its `RepairContext`, never
in the `Crash`, which they only read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableSequence
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

from daifu.config import Settings

if TYPE_CHECKING:
    from daifu.core.account import Account, Firing
    from daifu.core.crash import Crash
    from daifu.core.decisions import Decision


class RepairEntry(Protocol):
    """The record of one repair, as the runtime reports its progress to it."""

    number: int
    extra: dict[str, Any]

    def decided(self, decision: Decision, decided_by: str) -> None: ...

    def refused(self, decision: Decision, decided_by: str, reason: str) -> None: ...

    def resumed(self, started: float) -> None: ...

    def failed(self, decided_by: str) -> None: ...


@dataclass
class RepairContext:
    """What the layers deciding one crash add to it; the runtime reads it once a decision is taken.

    settings: the configuration the crash is handled under, read once: its attempts limit, its
        deciders and its record see one configuration, and a repeated crash does not read the
        environment again in its restore window.
    entry: the record of this repair; deciders add facts to `entry.extra` (a trial's verdict).
    watch: set by a decider that wants the iterations after its repair watched (`daifu.decide.watch`):
        called at the start of each, it says whether to go on watching.
    edited_locals: set by a decider that let a person rebind locals in the live frame (the console's
        `!x = 1`): the locals to resume with, instead of the snapshot taken at the crash.
    tried: what was tried on this crash (`Crash.tried` reads the same list); deciders add to it
        through `note_tried`, the runtime adds each refusal and the decision applied.
    shown: the repair bot's suggestions a person was shown for this crash (the approval prompt, the
        page, the console's `ask`): a person's decision among them was suggested by the bot.
    """

    settings: Settings
    entry: RepairEntry
    tried: MutableSequence[tuple[str, str]]
    watch: Callable[[FrameType], bool] | None = None
    edited_locals: Mapping[str, Any] | None = None
    shown: list[Decision] = field(default_factory=list)

    def note_tried(self, decision: Decision, outcome: str, once: bool = False) -> None:
        """Note that `decision` was tried on this crash, and how it went (refused by its trial...): it
        shows in `Crash.tried`, so that if the crash comes back the next candidate is taken. `once`:
        not when `decision` is noted already."""
        text = repr(decision)
        if not once or all(text != tried for tried, _ in self.tried):
            self.tried.append((text, outcome))


class Handling(Protocol):
    """What the runtime needs from the layers above: settings, a decision for a crash, and a record of
    it; and, for a crash nothing repaired, a last word before its exception goes on (`unrepaired`: the
    rescue of what it held). None of them may raise: the user's exception must go on unchanged.

    passed_over: a repair is about to pass over work (`daifu.core.account`): judge `firing` against the
    budget of `account` and record it (in `entry`, when it fires as the repair of a crash, else on its
    own); `None` lets it pass (counted), a reason stops it (the runtime refuses the decision, or takes
    a surgery's version back so that the original statement runs).
    """

    def settings(self) -> Settings: ...

    def begin(self, crash: Crash, settings: Settings) -> RepairEntry: ...

    def decide(self, crash: Crash, context: RepairContext) -> tuple[Decision, str]: ...

    def note(self, text: str) -> None: ...

    def unrepaired(self, crash: Crash) -> None: ...

    def passed_over(self, account: Account, firing: Firing, entry: RepairEntry | None) -> str | None: ...
