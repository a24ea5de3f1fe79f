"""The decision layer's contracts: who decided, where a decision comes from, and the person it may ask.

Everything in `daifu.decide` speaks these: a `Source` answers a crash or passes it on (the chain,
`daifu.decide.chain`); `DecidedBy` names who took a decision (the record and `daifu show` print it);
a `Person` is someone at the terminal, whom a source may ask to decide (the `(DaiFu)` console) or to
approve one of the repair bot's candidates (the approval prompt). The decision layer never imports
the console: `daifu.vaccinate`, which sits above both, hands the chain a `Person` that opens it.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import TYPE_CHECKING, Protocol

from daifu.core.crash import Crash
from daifu.core.decisions import Decision
from daifu.core.handling import RepairContext

if TYPE_CHECKING:
    from daifu.decide.candidates import Candidate


class DecidedBy(str, Enum):
    """Who took a decision, as the record and `daifu show` name it."""

    POLICY = "policy"
    REGISTRY = "registry"
    REPLAY = "replay"
    BROADCAST = "broadcast"
    BOT = "bot"
    CONSOLE = "console"
    LEADER = "leader rank"
    DEFAULT = "default"

    def __str__(self) -> str:
        return self.value


class Source(Protocol):
    """One place a decision can come from; `None` passes the crash to the next source."""

    decided_by: DecidedBy

    def decide(self, crash: Crash, context: RepairContext) -> Decision | None: ...


class Person(Protocol):
    """A person at the terminal, as the decision layer asks them (`daifu.vaccinate` gives the console's).

    present: whether someone is there to answer (standard input is a terminal).
    console: the `(DaiFu)` console on the crash; the decision taken there, or `None` (raise).
    approve: the approval prompt: the person applies one of `options` (each shown with its check and
        its trial's verdict), edits it, or rejects them all; the decision, or `None` (raise).
    """

    def present(self) -> bool: ...

    def console(self, crash: Crash, context: RepairContext) -> Decision | None: ...

    def approve(self, crash: Crash, context: RepairContext, diagnosis: str,
                options: Sequence[Candidate]) -> Decision | None: ...
