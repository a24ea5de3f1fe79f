"""Settings: the seed's `TRANSFORM_REGISTRY` switches, `configure()`, and `DAIFU_*` variables.

Precedence, highest first: a value given to `configure()`, the environment variable, the
default. The seed switches in `TRANSFORM_REGISTRY` keep working beside them.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any
from collections.abc import Callable

from daifu.environ import EnvironmentMemo

MODES = ("interactive", "automatic", "replay", "off")
APPROVALS = ("ask", "auto", "never", "remote")
REMOTE_FALLBACKS = ("raise", "auto")
MAX_REMOTE_DEADLINE = 7 * 24 * 3600.0

TRANSFORM_REGISTRY: dict[str, Any] = {
    "IS_AUTOMATIC": False,
    "DIRECTLY_RETRY": False,
    "DIRECTLY_RETRY_FIRST": False,
}
"""The prototype's switches. `REPEAT_ACTIONS` has no default: as in the prototype, setting it at
all (even to `None`) marks a repeated experiment, whose record `log_program_end` copies."""
_REGISTRY_DEFAULTS = dict(TRANSFORM_REGISTRY)


class ConfigError(ValueError):
    """A setting has a value DaiFu cannot use; the message names the setting and the value."""


@dataclass(frozen=True)
class Settings:
    """The effective configuration.

    mode: what happens on a crash no policy decides — `interactive` (the console when a person
        is at a terminal, else `Raise`), `automatic` (ask the repair bot), `replay` (re-apply the
        recorded repairs), `off` (`transform` returns functions untouched).
    approve: for repair-bot suggestions — `ask` (a prompt), `auto` (apply the best safe one),
        `never` (record them and raise), `remote` (a person decides on the repair bot service's
        approval page while the process waits; `daifu.decide.remote`).
    bot_url: the repair bot's base URL; `None` means the embedded rules engine, in-process.
    bot_deadline: seconds one call to the repair bot may take in all (connecting, waiting, reading);
        past it, the embedded rules engine answers instead.
    max_attempts: repairs allowed at one site without progress before falling back to `Raise`.
    workspace: the folder for workspace files and the JSON-lines record.
    max_trials: candidate repairs tried on a sandboxed copy of the run, per crash, at most.
    trial_seconds: the time one trial may take before it is stopped.
    trial_iterations: the iterations past the crashed one a trial's copy runs (its horizon), within
        `trial_seconds`: fewer when the next would not end in the time left, or the loop ends.
    pass_over_budget: in how many of the iterations a trial sees a repair may pass over work (a skip,
        a surgery's `continue`, rows dropped from a batch, an optimizer step not taken) and pass: by
        default 1, the crashed one.
    trial_memory: the memory one trial may take, in bytes (given as `2GB`, `512MiB` or a number);
        `None`: what the machine has free. A trial that may need more is not started.
    remote_deadline: with `approve="remote"`, seconds the process waits for a person's decision.
    remote_fallback: what it does then — `raise` (the exception goes on) or `auto` (the verified
        automatic repair of `approve="auto"`).
    rescue: whether a crash that nothing repairs leaves the trained state it held in
        `<workspace>/rescue/` before the exception goes on (`daifu.rescue`).
    rescue_seconds: the time a rescue may take; past it the rescue is abandoned, said, and the run
        goes on as without it.
    rescue_on: the signals (`SIGTERM`, `SIGUSR1`...) that take a rescue at the next statement of a
        vaccinated function, then have their usual effect (`daifu.rescue.signals`); none by default.
    pass_over: what an automatic repair may pass over at its site in the run (`daifu.core.account`)
        before automatic repairs there stop — `batch` (the crashed batch's own samples, once), a whole
        number of samples, or `unlimited`.
    vaccinate: functions to vaccinate by name, `MODULE:QUALNAME` (`daifu.targets`), given as a list
        or a comma-separated text: `daifu run` vaccinates them before the script runs, `configure()`
        at once.
    """

    mode: str = "interactive"
    approve: str = "ask"
    bot_url: str | None = None
    bot_deadline: float = 45.0
    max_attempts: int = 3
    workspace: Path = Path("daifu_workspace")
    max_trials: int = 8
    trial_seconds: float = 5.0
    trial_iterations: int = 5
    pass_over_budget: int = 1
    trial_memory: int | None = None
    remote_deadline: float = 3600.0
    remote_fallback: str = "raise"
    rescue: bool = True
    rescue_seconds: float = 120.0
    rescue_on: tuple[str, ...] = ()
    pass_over: str = "batch"
    vaccinate: tuple[str, ...] = ()


_ENV = {
    "mode": "DAIFU_MODE",
    "approve": "DAIFU_APPROVE",
    "bot_url": "DAIFU_REPAIRBOT_URL",
    "bot_deadline": "DAIFU_BOT_DEADLINE",
    "max_attempts": "DAIFU_MAX_ATTEMPTS",
    "workspace": "DAIFU_WORKSPACE",
    "max_trials": "DAIFU_MAX_TRIALS",
    "trial_seconds": "DAIFU_TRIAL_SECONDS",
    "trial_iterations": "DAIFU_TRIAL_ITERATIONS",
    "pass_over_budget": "DAIFU_PASS_OVER_BUDGET",
    "trial_memory": "DAIFU_TRIAL_MEMORY",
    "remote_deadline": "DAIFU_REMOTE_DEADLINE",
    "remote_fallback": "DAIFU_REMOTE_FALLBACK",
    "rescue": "DAIFU_RESCUE",
    "rescue_seconds": "DAIFU_RESCUE_SECONDS",
    "rescue_on": "DAIFU_RESCUE_ON",
    "pass_over": "DAIFU_PASS_OVER",
    "vaccinate": "DAIFU_VACCINATE",
}
_given: dict[str, Any] = {}
_policy: list[Callable[..., Any] | None] = [None]


def _checked(name: str, value: Any, source: str) -> Any:
    if name == "mode" and value not in MODES:
        raise ConfigError(f"{source} has value {value!r}: not one of {', '.join(MODES)}.")
    if name == "approve" and value not in APPROVALS:
        raise ConfigError(f"{source} has value {value!r}: not one of {', '.join(APPROVALS)}.")
    if name in ("max_attempts", "max_trials", "trial_iterations", "pass_over_budget"):
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{source} has value {value!r}: not a whole number.") from None
        if number < (1 if name == "max_attempts" else 0):
            raise ConfigError(f"{source} has value {value!r}: it must be at least {1 if name == 'max_attempts' else 0}.")
        return number
    if name == "rescue":
        return _switch(value, source)
    if name == "rescue_on":
        return _signals(value, source)
    if name in ("trial_seconds", "bot_deadline", "rescue_seconds"):
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{source} has value {value!r}: not a number of seconds.") from None
        if not (math.isfinite(seconds) and 0 < seconds <= 3600):
            raise ConfigError(f"{source} has value {value!r}: it must be a number of seconds above 0, at most 3600.")
        return seconds
    if name == "trial_memory":
        return _bytes(value, source)
    if name == "remote_fallback" and value not in REMOTE_FALLBACKS:
        raise ConfigError(f"{source} has value {value!r}: not one of {', '.join(REMOTE_FALLBACKS)}.")
    if name == "remote_deadline":
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{source} has value {value!r}: not a number of seconds.") from None
        if not (math.isfinite(seconds) and 0 < seconds <= MAX_REMOTE_DEADLINE):
            raise ConfigError(f"{source} has value {value!r}: it must be a number of seconds above 0, "
                              f"at most {MAX_REMOTE_DEADLINE:.0f} (a week).")
        return seconds
    if name == "pass_over":
        return _pass_over(value, source)
    if name == "vaccinate":
        return _names(value, source)
    if name == "workspace":
        return Path(value)
    if name == "bot_url" and value is not None and not str(value).startswith(("http://", "https://")):
        raise ConfigError(f"{source} has value {value!r}: not an http(s) URL.")
    return value


_ON, _OFF = ("1", "on", "true", "yes"), ("0", "off", "false", "no")


def _switch(value: Any, source: str) -> bool:
    """A setting that is on or off: a bool, or one of the words of `_ON` and `_OFF`."""
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word not in _ON + _OFF:
        raise ConfigError(f"{source} has value {value!r}: not on or off ({', '.join(_ON + _OFF)}).")
    return word in _ON


_UNCATCHABLE = ("SIGKILL", "SIGSTOP")


def _signals(value: Any, source: str) -> tuple[str, ...]:
    """Signal names, given as a list or a comma-separated text (`"SIGTERM,SIGUSR1"`); each one a signal
    of this platform that a program can catch."""
    import signal  # only when the setting is given

    names = [part.strip() for part in value.split(",")] if isinstance(value, str) else [str(v) for v in value]
    found = []
    for name in filter(None, names):
        name = name.upper() if name.upper().startswith("SIG") else "SIG" + name.upper()
        if name not in signal.Signals.__members__ or name in _UNCATCHABLE:
            raise ConfigError(f"{source} has value {value!r}: {name} is not a signal a program can catch here.")
        found.append(name)
    return tuple(dict.fromkeys(found))


def _names(value: Any, source: str) -> tuple[str, ...]:
    """Names of functions, `MODULE:QUALNAME`, given as a list or a comma-separated text; each one
    checked for its form only (whether it resolves is known when it is vaccinated)."""
    parts = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    names = tuple(dict.fromkeys(part.strip() for part in parts if part.strip()))
    for name in names:
        module, _, qualname = name.rpartition(":")
        if not all(piece.isidentifier() for piece in (module.split(".") if module else []) + qualname.split(".")):
            raise ConfigError(f"{source} has value {value!r}: {name!r} is not MODULE:QUALNAME.")
    return names


PASS_OVER_WORDS = ("batch", "unlimited")


def _pass_over(value: Any, source: str) -> str:
    """`batch`, `unlimited`, or a whole number of samples (as text: the setting is one type)."""
    text = str(value).strip().lower()
    if text in PASS_OVER_WORDS or (text.isdigit() and not isinstance(value, bool)):
        return str(int(text)) if text.isdigit() else text
    raise ConfigError(f"{source} has value {value!r}: not one of {', '.join(PASS_OVER_WORDS)}, "
                      "nor a whole number of samples.")


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def _bytes(value: Any, source: str) -> int:
    """A size: a number of bytes, or a number with a unit (`1.5GB` is 1.5e9 bytes, `2GiB` is 2 * 2**30)."""
    text = str(value).strip().lower().replace(" ", "")
    number = text.rstrip("kmgtib")
    unit = text[len(number):]
    try:
        count = float(number) * _UNITS[unit]
    except (ValueError, KeyError):
        raise ConfigError(f"{source} has value {value!r}: not a size (bytes, or a number with KB, MB, GB, "
                          "KiB, MiB or GiB).") from None
    if not (math.isfinite(count) and count >= 1):
        raise ConfigError(f"{source} has value {value!r}: it must be a size above 0.")
    return int(count)


def configure(**changes: Any) -> Settings:
    """Set DaiFu's behaviour from code; returns the effective settings.

    `configure(mode="automatic", approve="auto")`; a value of `None` returns a setting to its
    environment variable or default.
    """
    known = {f.name for f in fields(Settings)}
    for name, value in changes.items():
        if name not in known:
            raise ConfigError(f"Unknown setting {name!r}; known: {', '.join(sorted(known))}.")
        if value is None:
            _given.pop(name, None)
        else:
            _given[name] = _checked(name, value, f"configure({name}=...)")
    _tell_watchers()
    return settings()


def variable(name: str) -> str:
    """The environment variable of setting `name` (`approve` -> `DAIFU_APPROVE`)."""
    return _ENV[name]


def given(name: str) -> bool:
    """Whether setting `name` was given (in code or in the environment), rather than left to its default."""
    return name in _given or bool(os.environ.get(_ENV[name]))


def settings() -> Settings:
    """The effective settings now: `configure()` values, then environment, then defaults.

    Read afresh at every call (a changed variable applies at once); they are made again only when
    their inputs changed, so that the same inputs give the same object without checking them again.
    """
    automatic = bool(TRANSFORM_REGISTRY.get("IS_AUTOMATIC"))
    return _last.get(lambda: _made(automatic), (tuple(_given.items()), automatic))


def _made(automatic: bool) -> Settings:
    values: dict[str, Any] = {}
    for name, variable in _ENV.items():
        value = os.environ.get(variable)
        if name in _given:
            values[name] = _given[name]
        elif value:
            values[name] = _checked(name, value, f"Environment variable {variable}")
    result = replace(Settings(), **values)
    if automatic and "mode" not in _given:
        result = replace(result, mode="automatic")
    return result


_last: EnvironmentMemo[Settings] = EnvironmentMemo()
"""The settings `settings()` made last, with what they were made of."""


def set_policy(fn: Callable[..., Any] | None) -> None:
    """Install `fn(crash)`, asked first on every crash; it returns a decision or `None`.

    `None` falls through to the configured mode. `set_policy(None)` removes the policy.
    """
    if fn is not None and not callable(fn):
        raise TypeError(f"set_policy() takes a callable or None, not {type(fn).__name__}.")
    _policy[0] = fn


def policy() -> Callable[..., Any] | None:
    """The installed policy, if any."""
    return _policy[0]


def reset() -> None:
    """Forget everything set from code: `configure()` values, the policy, the registry's switches."""
    _given.clear()
    _policy[0] = None
    TRANSFORM_REGISTRY.clear()
    TRANSFORM_REGISTRY.update(_REGISTRY_DEFAULTS)
    _tell_watchers()


_watchers: list[Callable[[], None]] = []


def watch(callback: Callable[[], None]) -> None:
    """Call `callback()` after each `configure()` and `reset()`: for a setting that acts on the process
    when it changes (`rescue_on` installs signal handlers) rather than when it is next read."""
    if callback not in _watchers:
        _watchers.append(callback)


def _tell_watchers() -> None:
    for callback in list(_watchers):
        callback()
