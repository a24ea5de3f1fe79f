"""Who decides what to do with a crash: one ordered chain of decision sources.

`sources(settings, person)` builds the chain from the configuration, in one place:

1. the policy installed with `daifu.set_policy`;
2. the prototype's switches (`DIRECTLY_RETRY`, `DIRECTLY_RETRY_FIRST`);
3. the replay of a recorded run (`mode="replay"` or a `REPEAT_ACTIONS` list);
4. a broadcast file of the same crash, saved by a person in another process;
5. the repair bot (`mode="automatic"`);
6. the `(DaiFu)` console, when a person is at the terminal (`mode="interactive"`, or a replay
   that ran out of recorded repairs).

The first source that answers decides; when none does, the original exception is raised, and
the terminal says why once. In a multi-rank job the ranks that meet the same crash share one
decision (`daifu.decide.distributed` wraps the chain). The sources and the person they may ask are
the layer's contracts (`daifu.decide.contract`); the person is handed in (`daifu.vaccinate`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

from daifu import config, ranks
from daifu.core.crash import Crash
from daifu.core.decisions import Decision, Raise, Retry
from daifu.core.handling import RepairContext
from daifu.core.kinds import is_decision
from daifu.decide import by_person, failure, warm
from daifu.decide.contract import DecidedBy, Person, Source
from daifu.decide.hints import setting
from daifu.say import say_once


class PolicySource:
    """The function installed with `daifu.set_policy`."""

    decided_by = DecidedBy.POLICY

    def decide(self, crash: Crash, context: RepairContext) -> Decision | None:
        policy = config.policy()
        return None if policy is None else policy(crash)  # type: ignore[no-any-return]


class SwitchSource:
    """The prototype's `TRANSFORM_REGISTRY['DIRECTLY_RETRY']` and `['DIRECTLY_RETRY_FIRST']`."""

    decided_by = DecidedBy.REGISTRY

    def decide(self, crash: Crash, context: RepairContext) -> Decision | None:
        registry = config.TRANSFORM_REGISTRY
        if registry.get("DIRECTLY_RETRY") or (registry.get("DIRECTLY_RETRY_FIRST") and crash.attempt == 1):
            return Retry()
        return None


class ReplaySource:
    """The next repair of the recorded run (`daifu.decide.replay`)."""

    decided_by = DecidedBy.REPLAY

    def decide(self, crash: Crash, context: RepairContext) -> Decision | None:
        from daifu.decide import replay

        return replay.decide(crash, context.settings)


class BroadcastSource:
    """A broadcast file of the same crash (`daifu.decide.broadcast`)."""

    decided_by = DecidedBy.BROADCAST

    def decide(self, crash: Crash, context: RepairContext) -> Decision | None:
        from daifu.decide import broadcast

        return broadcast.decide(crash)


@dataclass
class BotSource:
    """The repair bot's suggestions, chosen as `settings.approve` allows (`daifu.decide.automatic`);
    `person`: who approves them with `approve="ask"` (`None`: nobody here may be asked)."""

    person: Person | None
    decided_by = DecidedBy.BOT

    def decide(self, crash: Crash, context: RepairContext) -> Decision | None:
        warm.finish()  # no import in flight when a trial forks
        try:
            from daifu.decide import automatic  # loaded ahead by `daifu.decide.warm`, else here
        except ImportError as missing:
            say_once(f"automatic mode needs the repair bot's client, which is not installed ({missing}): "
                     "pip install 'daifu[bot]'")
            return None
        return automatic.decide(crash, context, self.person)


@dataclass
class ConsoleSource:
    """The `(DaiFu)` console, when a person is at the terminal."""

    person: Person
    decided_by = DecidedBy.CONSOLE

    def decide(self, crash: Crash, context: RepairContext) -> Decision | None:
        if not self.person.present():
            return None
        with by_person.waiting(context):
            decision = self.person.console(crash, context)
        if decision is not None:
            by_person.person_decided(context, decision, "console")
        return decision


def sources(settings: config.Settings, person: Person | None) -> list[Source]:
    """The chain of decision sources for `settings`, in the order they are asked; `person`: who is at
    the terminal (`None` when another rank owns it)."""
    replaying = settings.mode == "replay" or bool(config.TRANSFORM_REGISTRY.get("REPEAT_ACTIONS"))
    chain: list[Source] = [PolicySource(), SwitchSource()]
    if replaying:
        chain.append(ReplaySource())
    chain.append(BroadcastSource())
    if settings.mode == "automatic" and not replaying:
        chain.append(BotSource(person))
    if person is not None and (settings.mode == "interactive" or replaying):
        chain.append(ConsoleSource(person))
    return chain


def decide(crash: Crash, context: RepairContext, person: Person) -> tuple[Decision, DecidedBy]:
    """The decision for `crash`, and who took it."""
    if ranks.active():
        from daifu.decide import distributed

        return distributed.coordinate(
            crash, context, lambda crash, allowed: decide_here(crash, context, person if allowed else None)
        )
    return decide_here(crash, context, person)


def decide_here(crash: Crash, context: RepairContext, person: Person | None) -> tuple[Decision, DecidedBy]:
    """The decision taken in this process; without a person when another rank owns the terminal."""
    by_person.forget(context)  # an earlier offer's, which the runtime refused
    for source in sources(context.settings, person):
        try:
            answer = source.decide(crash, context)
        except Exception as error:  # a failing source must never hide the user's exception
            if source.decided_by is DecidedBy.POLICY:  # the user's own code
                warnings.warn(f"the DaiFu {source.decided_by} raised {error!r}; raising the original exception",
                              RuntimeWarning, 3)
            else:  # DaiFu's code: said as DaiFu's failure, once, with the step it was taking
                failure.report(str(source.decided_by), error)
            return Raise(), source.decided_by
        if answer is not None:
            return _checked(answer, source.decided_by), source.decided_by
    _say_declined(crash, context.settings, person)
    return Raise(), DecidedBy.DEFAULT


def _checked(value: Any, who: DecidedBy) -> Decision:
    if is_decision(value):
        return value  # type: ignore[no-any-return]
    warnings.warn(f"the DaiFu {who} returned {value!r}, not a DaiFu decision; raising", RuntimeWarning, 4)
    return Raise()


def _say_declined(crash: Crash, settings: config.Settings, person: Person | None) -> None:
    """Say once, on stderr, why DaiFu let a crash through when no source decided it, and what would let it act."""
    hint = f'{setting(mode="automatic", approve="auto")}, a policy (daifu.set_policy), or `daifu replay`'
    present = person is not None and person.present()
    if settings.mode == "interactive" and person is not None and not present:
        why = "no person is at a terminal to open the (DaiFu) console"
    elif settings.mode == "interactive" and person is None:
        why = f"the console belongs to rank {ranks.leader()}"
    elif settings.mode == "automatic" and settings.approve == "auto":
        why = "no suggestion of the repair bot passed its checks and its trial"
        hint = f'a policy (daifu.set_policy), or a person at the (DaiFu) console ({setting(mode="interactive")}, ' \
               'in a terminal)'
    elif settings.mode == "automatic" and settings.approve == "ask" and not present:
        why = "approve='ask' needs a person at a terminal, and none is there"
        if not config.given("approve"):  # unattended, nothing is applied unless the user said so
            why += " (`ask` is the default: without a person, only approve='auto' applies a repair)"
        hint = (f'{setting(approve="auto")} (verified repairs only), {setting(approve="remote")} '
                '(a person in a browser), or a policy')
    elif settings.mode == "automatic" and settings.approve == "never":
        why = "approve='never' records the repair bot's suggestions and applies none"
    elif settings.mode == "automatic":
        why = f"the repair bot's suggestions could not be applied with approve={settings.approve!r}"
    else:
        why = "no recorded repair matched"
    say_once(f"{crash.exception_type} in {crash.qualname} ({crash.filename}:{crash.lineno}) is raised: {why}. "
             f"To let DaiFu act: {hint}.")
