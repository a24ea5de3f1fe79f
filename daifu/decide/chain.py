"""Who decides what to do with a crash: the policy, the seed switches, then the configured mode.

Each mode's decider lives in its own module and is imported only when that mode is used; a mode
whose module is missing or fails falls back to `Raise`, with a warning.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from daifu import config
from daifu.decide import distributed
from daifu.core.crash import Crash
from daifu.core.decisions import Action, Decision, Raise, Retry, Skip, Surgery

DECISIONS = (Retry, Skip, Action, Surgery, Raise)
_MODE_DECIDERS = {"automatic": "daifu.decide.automatic", "replay": "daifu.decide.replay", "interactive": "daifu.console.session"}


def _checked(value: Any, who: str) -> Decision | None:
    if value is None or isinstance(value, DECISIONS):
        return value
    warnings.warn(f"the {who} returned {value!r}, not a DaiFu decision; raising", RuntimeWarning, 4)
    return Raise()


def decide(crash: Crash, settings: config.Settings | None = None) -> tuple[Decision, str]:
    """The decision for `crash`, and who took it (policy, registry, bot, replay, console, default).

    In a multi-rank torch.distributed job the ranks that meet the same crash share one decision
    (`daifu.distributed`).
    """
    settings = settings or config.settings()
    if distributed.active():
        return distributed.coordinate(
            crash, lambda crash, console_allowed: _decide_here(crash, settings, console_allowed)
        )
    return _decide_here(crash, settings, True)


def _decide_here(crash: Crash, settings: config.Settings, console_allowed: bool) -> tuple[Decision, str]:
    """The decision taken in this process; without a console when another rank owns the terminal."""
    policy = config.policy()
    if policy is not None:
        try:
            decision = _checked(policy(crash), "policy")
        except Exception as error:
            warnings.warn(f"the DaiFu policy raised {error!r}; raising the original exception", RuntimeWarning, 3)
            return Raise(), "policy"
        if decision is not None:
            return decision, "policy"
    registry = config.TRANSFORM_REGISTRY
    if registry.get("DIRECTLY_RETRY") or (registry.get("DIRECTLY_RETRY_FIRST") and crash.attempt == 1):
        return Retry(), "registry"
    mode = "replay" if registry.get("REPEAT_ACTIONS") else settings.mode
    if mode == "interactive" and not console_allowed:
        return Raise(), "default"
    module_name = _MODE_DECIDERS.get(mode)
    if module_name is None:
        return Raise(), "default"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as missing:
        if missing.name != module_name:
            raise
        return Raise(), "default"
    try:
        decision = _checked(module.decide(crash, settings), module_name)
    except Exception as error:
        warnings.warn(f"{module_name} failed: {error!r}; raising the original exception", RuntimeWarning, 3)
        return Raise(), mode
    return (decision or Raise()), {"automatic": "bot", "interactive": "console"}.get(mode, mode)
