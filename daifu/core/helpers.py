"""`Helpers`: the one object generated code reaches as `@rt` (pytest's `@pytest_ar` habit).

It is a constant of each compiled code object (see `daifu.core.compiling`), so the vaccinated
function needs no closure cell and no global of its own. Everything generated code calls is an
attribute here, looked up on this object so that a user's global named `iter` or `isinstance`
never changes what the generated code does.
"""

from __future__ import annotations

import builtins
import sys
from collections.abc import Callable
from typing import Any

from daifu.core.guard import Guard, Handover, exited, mark_passed, no_protocol, unseen


class Helpers:
    """What the generated code of one vaccinated function calls.

    crash: `Vaccine.crash`, called by a catcher with the exception (and a lambda returning the
        frame's cells); returns to let the exception go on, or raises a `Handover`.
    switch: `Vaccine.switch`, called by a segment where the code it leaves out starts (see
        `Rewriter.segment`); raises the `Handover` to the continuation that resumes there.
    compiled: `Vaccine.compiled`, called by the stub a surgery installs until its new version's
        fast path is compiled: the function, with that code compiled and in place of the stub.
    watching: what watches the iterations after an automatic repair (`daifu.decide.watch`),
        called with the frame at the start of each; it returns False when it has seen enough.
    fired: `Vaccine.fired`, called by a surgery's probe (`daifu.core.account.Probe`) with its number,
        the statement's path, the frame, its cells and (a `rows` probe) what the names held before.
    """

    __slots__ = ("compiled", "crash", "fired", "switch", "watching")

    Exception = Exception
    BaseException = builtins.BaseException  # shadows the builtin in this class: annotations say `builtins.`
    AttributeError = builtins.AttributeError
    Handover = Handover
    guard = Guard
    exited = staticmethod(exited)
    mark_passed = staticmethod(mark_passed)
    no_protocol = staticmethod(no_protocol)
    unseen = staticmethod(unseen)
    iter = staticmethod(builtins.iter)
    isinstance = staticmethod(builtins.isinstance)
    type = builtins.type

    def __init__(self, crash: Callable[..., None], switch: Callable[..., None],
                 compiled: Callable[[], Callable[..., Any]], fired: Callable[..., None]) -> None:
        self.crash = crash
        self.switch = switch
        self.compiled = compiled
        self.fired = fired
        self.watching: Callable[[Any], bool] | None = None

    def passed(self, number: int, path: tuple[Any, ...], cells: Any = None) -> None:
        """A jump a surgery introduced is about to leave the iteration (`daifu.core.account`)."""
        self.fired(number, path, sys._getframe(1), cells, None)

    @staticmethod
    def rows_before(names: tuple[str, ...]) -> dict[str, Any]:
        """What `names` hold before a changed statement rebinds them (a `rows` probe)."""
        frame = sys._getframe(1)
        local_values, global_values = frame.f_locals, frame.f_globals
        held = {name: global_values[name] for name in names if name in global_values}
        held.update((name, local_values[name]) for name in names if name in local_values)
        return held

    def rows_after(self, number: int, path: tuple[Any, ...], before: dict[str, Any], cells: Any = None) -> None:
        """A changed statement rebound the names of `before`: count the rows it dropped. Returns
        `None`, which the generated code binds to its temporary, releasing the old values."""
        self.fired(number, path, sys._getframe(1), cells, before)

    def watch(self) -> None:
        """The start of an iteration after an automatic repair (watched continuations only)."""
        watching = self.watching
        if watching is not None and not watching(sys._getframe(1)):
            self.watching = None

    @staticmethod
    def leave(*managers: Any) -> None:
        """Exit the `with` statements a run resuming above them leaves (`Mode.ABOVE`): `managers`
        alternates each one's manager and `__exit__`, innermost first, `None` for one not open. Each
        exits as a `continue` out of it would: with no exception, or with the error the exit of an
        inner one raised (marked passed: an error of `__exit__` is not resumable), which goes on
        unless one suppresses it."""
        error: builtins.BaseException | None = None
        for manager, exit_method in zip(managers[0::2], managers[1::2]):
            if manager is None:
                continue
            try:
                if exited(exit_method, manager, error):
                    error = None
            except builtins.BaseException as raised:
                error = raised
        if error is not None:
            raise error

    @staticmethod
    def values(namespace: dict[str, Any], names: tuple[str, ...]) -> list[Any]:
        """The values of `names` in a snapshot: what a segment's prologue binds its locals to."""
        return [namespace[name] for name in names]

    @staticmethod
    def handled() -> builtins.BaseException | None:
        """The exception being handled around a `try ... finally`, as it starts."""
        return sys.exc_info()[1]

    @staticmethod
    def pending(outside: builtins.BaseException | None) -> tuple[str, Any] | None:
        """What a `finally` clause is finishing, as it starts: `("raise", error)` when an exception
        other than the one handled around the `try` (`outside`) is on its way, else `None`."""
        error = sys.exc_info()[1]
        return None if error is None or error is outside else ("raise", error)

    @staticmethod
    def trial_end() -> None:
        """The interrupted iteration of a trial is over (trial continuations only)."""
        from daifu.core import trial  # loaded already: only a trial's continuation calls this

        trial.iteration_over(sys._getframe(1))

    @staticmethod
    def trial_iteration() -> None:
        """An iteration of a trial past the interrupted one starts (trial continuations only)."""
        from daifu.core import trial

        trial.iteration_started(sys._getframe(1))

    @staticmethod
    def trial_loop_end() -> None:
        """The loop a trial looks along is over (trial continuations only)."""
        from daifu.core import trial

        trial.loop_over(sys._getframe(1))
