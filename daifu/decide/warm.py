"""Automatic mode's decision layer, loaded off the program's thread before the first crash needs it.

Deciding a crash in automatic mode goes through the bot client, the protocol's pydantic models, the
rules engine and its candidate generator, the allowlist and the trial: several hundred milliseconds
of imports. `import daifu` must stay light, so they are not loaded with it; loaded at the first
crash, they were most of that crash's time to resume. Once the program has shown that it will need
them (automatic mode configured and a function vaccinated, in a program that has imported torch),
a daemon thread imports them instead, while the program trains.

What keeps that harmless:

- it imports only when no module is being imported (a module's body running: importing beside it
  could wait on a lock it holds), and only DaiFu's own modules and what they import; never torch
  (the program has loaded it already) nor anything the decision layer would not load at a crash;
- it prints nothing, and an exception in it is kept, never raised: the first crash then imports
  what it needs as it always did, and says what failed in its own words; the record keeps the
  warming's failure at DEBUG level (`finish`);
- the first crash waits for it to end (`finish`) before it decides: no import is then in flight
  when a trial forks the process; any other fork (a `DataLoader`'s workers) waits for the module being
  imported, if any, and the thread waits for the fork (`_importing`): a child never inherits an import
  half done, whose lock no thread of its own would release.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading

from daifu import config

WAIT_S = 0.02
"""How long the thread sleeps between two looks for an import in progress."""
GIVE_UP_S = 60.0
"""How long it waits for the program's imports to end before it gives up (the crash then imports)."""
FINISH_S = 30.0
"""How long the first crash waits for the thread, at most, before it imports what it needs itself."""

_READY = {
    "daifu.core.sandbox": "unavailable",  # loads libseccomp, which the trial's fork needs
    "daifu.report.build": "prime",  # the platform (read out of the interpreter's binary), the library folders
    "daifu.decide.allowlist_numeric": "pure_objects",  # thousands of names of torch's and numpy's, read once
}
"""What is called once a module is loaded, for what the first crash would do first otherwise."""

_importing = threading.RLock()
"""Held by the thread while it imports one module, and by a thread that forks the process while it forks
(re-entrant: a fork from the thread itself, inside an import, goes on)."""

_state: dict[str, threading.Thread | BaseException | None] = {"thread": None, "failure": None}
_stop = threading.Event()
_lock = threading.Lock()


def modules(settings: config.Settings) -> list[str]:
    """What deciding a crash under `settings` imports that the first vaccination did not."""
    if settings.mode != "automatic":
        return []
    names = ["daifu.decide.broadcast", "daifu.store.workspace", "daifu.decide.automatic", "daifu.report.build",
             "daifu.decide.allowlist_numeric"]
    names.append("repairbot.backends.rules" if settings.bot_url is None else "httpx")
    if settings.approve == "remote":
        names.append("daifu.decide.remote")
    if settings.max_trials > 0:
        names += ["daifu.core.trial", "daifu.core.repair_path", "daifu.core.sandbox"]
        if settings.trials != "fork":  # an in-process trial's, and a repeat's short trial (`daifu.decide.repeat`)
            names.append("daifu.core.inprocess")
    return names


def start() -> None:
    """Begin loading the decision layer in the background, once per process, when the settings now
    say it will be needed and the program has imported torch; else do nothing (`configure()` asks again)."""
    names = modules(config.settings())
    if not names or "torch" not in sys.modules:
        return
    with _lock:
        if _state["thread"] is not None:
            return
        thread = threading.Thread(target=_load, args=(names,), name="daifu-warm", daemon=True)
        _state["thread"] = thread
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(before=_importing.acquire, after_in_parent=_importing.release,
                                after_in_child=_importing.release)
    thread.start()


def finish() -> BaseException | None:
    """Wait for the loading to end (or stop it waiting for the program's imports), at most `FINISH_S`;
    the exception that ended it, if one did, said once in the record at DEBUG level."""
    thread = _state["thread"]
    if not isinstance(thread, threading.Thread):
        return None
    _stop.set()
    thread.join(FINISH_S)
    failure = _state["failure"]
    if isinstance(failure, BaseException):
        _state["failure"] = None
        _note(failure)
        return failure
    return None


def _load(names: list[str]) -> None:
    try:
        if not _imports_quiet():
            return
        for name in names:
            with _importing:
                module = importlib.import_module(name)
                if name in _READY:
                    getattr(module, _READY[name])()
    except BaseException as error:  # never the program's: the first crash imports again, and says it
        _state["failure"] = error


def _imports_quiet() -> bool:
    """Wait until no module is being imported; `False` when told to stop first, or after `GIVE_UP_S`."""
    for _ in range(int(GIVE_UP_S / WAIT_S)):
        if not importing():
            return True
        if _stop.wait(WAIT_S):
            return False
    return False


def importing() -> bool:
    """Whether some thread is running a module's body now: importlib marks its spec `_initializing`
    from the module's creation to the end of its body."""
    return any(getattr(getattr(module, "__spec__", None), "_initializing", False)
               for module in list(sys.modules.values()))


def _note(failure: BaseException) -> None:
    from daifu.store import record

    try:
        record.debug(f"loading the decision layer ahead of the first crash failed: {failure!r}")
    except Exception:  # the record is a side file: it never costs the run
        pass
