"""Who decides what to do with a crash: one ordered chain of decision sources.

`sources(settings, console_allowed)` builds the chain from the configuration, in one place:

1. the policy installed with `daifu.set_policy`;
2. the prototype's switches (`DIRECTLY_RETRY`, `DIRECTLY_RETRY_FIRST`);
3. the replay of a recorded run (`mode="replay"` or a `REPEAT_ACTIONS` list);
4. a broadcast file of the same crash, saved by a person in another process;
5. the repair bot (`mode="automatic"`);
6. the `(DaiFu)` console, when a person is at the terminal (`mode="interactive"`, or a replay
   that ran out of recorded repairs).

The first source that answers decides; when none does, the original exception is raised, and
the terminal says why once. In a multi-rank job the ranks that meet the same crash share one
decision (`daifu.decide.distributed` wraps the chain).
"""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from daifu import config, ranks
from daifu.core.crash import Crash
from daifu.core.decisions import Decision, Raise, Retry, is_decision
from daifu.decide import failure
from daifu.say import say_once


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

    def decide(self, crash: Crash) -> Decision | None: ...


class PolicySource:
    """The function installed with `daifu.set_policy`."""

    decided_by = DecidedBy.POLICY

    def decide(self, crash: Crash) -> Decision | None:
        policy = config.policy()
        return None if policy is None else policy(crash)  # type: ignore[no-any-return]


class SwitchSource:
    """The prototype's `TRANSFORM_REGISTRY['DIRECTLY_RETRY']` and `['DIRECTLY_RETRY_FIRST']`."""

    decided_by = DecidedBy.REGISTRY

    def decide(self, crash: Crash) -> Decision | None:
        registry = config.TRANSFORM_REGISTRY
        if registry.get("DIRECTLY_RETRY") or (registry.get("DIRECTLY_RETRY_FIRST") and crash.attempt == 1):
            return Retry()
        return None


@dataclass
class ReplaySource:
    """The next repair of the recorded run (`daifu.decide.replay`)."""

    settings: config.Settings
    decided_by = DecidedBy.REPLAY

    def decide(self, crash: Crash) -> Decision | None:
        from daifu.decide import replay

        return replay.decide(crash, self.settings)


class BroadcastSource:
    """A broadcast file of the same crash (`daifu.decide.broadcast`)."""

    decided_by = DecidedBy.BROADCAST

    def decide(self, crash: Crash) -> Decision | None:
        from daifu.decide import broadcast

        return broadcast.decide(crash)


@dataclass
class BotSource:
    """The repair bot's suggestions, chosen as `settings.approve` allows (`daifu.decide.automatic`)."""

    settings: config.Settings
    decided_by = DecidedBy.BOT

    def decide(self, crash: Crash) -> Decision | None:
        try:
            from daifu.decide import automatic  # the bot client (httpx) loads only when a crash needs it
        except ImportError as missing:
            say_once(f"automatic mode needs the repair bot's client, which is not installed ({missing}): "
                     "pip install 'daifu[bot]'")
            return None
        return automatic.decide(crash, self.settings)


class ConsoleSource:
    """The `(DaiFu)` console, when a person is at the terminal."""

    decided_by = DecidedBy.CONSOLE

    def decide(self, crash: Crash) -> Decision | None:
        if not _person_present():
            return None
        from daifu.console import session  # pdb loads only when a console opens

        return session.open_console(crash)


def sources(settings: config.Settings, console_allowed: bool = True) -> list[Source]:
    """The chain of decision sources for `settings`, in the order they are asked."""
    replaying = settings.mode == "replay" or bool(config.TRANSFORM_REGISTRY.get("REPEAT_ACTIONS"))
    chain: list[Source] = [PolicySource(), SwitchSource()]
    if replaying:
        chain.append(ReplaySource(settings))
    chain.append(BroadcastSource())
    if settings.mode == "automatic" and not replaying:
        chain.append(BotSource(settings))
    if console_allowed and (settings.mode == "interactive" or replaying):
        chain.append(ConsoleSource())
    return chain


def decide(crash: Crash, settings: config.Settings | None = None) -> tuple[Decision, DecidedBy]:
    """The decision for `crash`, and who took it."""
    settings = settings or config.settings()
    if ranks.active():
        from daifu.decide import distributed

        return distributed.coordinate(crash, lambda crash, allowed: decide_here(crash, settings, allowed))
    return decide_here(crash, settings, True)


def decide_here(crash: Crash, settings: config.Settings, console_allowed: bool) -> tuple[Decision, DecidedBy]:
    """The decision taken in this process; without a console when another rank owns the terminal."""
    for source in sources(settings, console_allowed):
        try:
            answer = source.decide(crash)
        except Exception as error:  # a failing source must never hide the user's exception
            if source.decided_by is DecidedBy.POLICY:  # the user's own code
                warnings.warn(f"the DaiFu {source.decided_by} raised {error!r}; raising the original exception",
                              RuntimeWarning, 3)
            else:  # DaiFu's code: said as DaiFu's failure, once, with the step it was taking
                failure.report(str(source.decided_by), error)
            return Raise(), source.decided_by
        if answer is not None:
            return _checked(answer, source.decided_by), source.decided_by
    _say_declined(crash, settings, console_allowed)
    return Raise(), DecidedBy.DEFAULT


def _checked(value: Any, who: DecidedBy) -> Decision:
    if is_decision(value):
        return value  # type: ignore[no-any-return]
    warnings.warn(f"the DaiFu {who} returned {value!r}, not a DaiFu decision; raising", RuntimeWarning, 4)
    return Raise()


def _person_present() -> bool:
    stdin = sys.stdin
    return bool(stdin is not None and stdin.isatty())


def _say_declined(crash: Crash, settings: config.Settings, console_allowed: bool) -> None:
    """Say once, on stderr, why DaiFu let a crash through when no source decided it, and what would let it act."""
    hint = 'daifu.configure(mode="automatic", approve="auto"), a policy (daifu.set_policy), or `daifu replay`'
    if settings.mode == "interactive" and console_allowed and not _person_present():
        why = "no person is at a terminal to open the (DaiFu) console"
    elif settings.mode == "interactive" and not console_allowed:
        why = f"the console belongs to rank {ranks.leader()}"
    elif settings.mode == "automatic" and settings.approve == "auto":
        why = "no suggestion of the repair bot passed its checks and its trial"
        hint = 'a policy (daifu.set_policy), or a person at the (DaiFu) console (mode="interactive", in a terminal)'
    elif settings.mode == "automatic" and settings.approve == "ask" and not _person_present():
        why = "approve='ask' needs a person at a terminal, and none is there"
        hint = 'approve="auto" (verified repairs only), approve="remote" (a person in a browser), or a policy'
    elif settings.mode == "automatic" and settings.approve == "never":
        why = "approve='never' records the repair bot's suggestions and applies none"
    elif settings.mode == "automatic":
        why = f"the repair bot's suggestions could not be applied with approve={settings.approve!r}"
    else:
        why = "no recorded repair matched"
    say_once(f"{crash.exception_type} in {crash.qualname} ({crash.filename}:{crash.lineno}) is raised: {why}. "
             f"To let DaiFu act: {hint}.")
