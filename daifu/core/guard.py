"""How a vaccinated `with` exits exactly once, and the pass mark.

A crash inside a `with` body can hand the rest of the invocation over to a continuation. The
frame that crashed then unwinds with a `Handover`, and its `with` must not exit: the
continuation, which finishes the body, exits it, once.

The fast path does not use a `with` statement for that: it runs the context manager protocol
inline (`daifu.core.rewrite`), keeping the manager in `@cmD` and its type's `__exit__` in `@exD`,
and calls `__exit__` unless a `Handover` is passing — as cheap as a plain `with` (a guard object
around the manager cost three Python-level calls, +300 ns, per execution). A continuation that
resumes inside the body re-enters it through a `Guard` made from those two (`Guard(@cmD, @exD)`).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from types import TracebackType
from typing import Any

_PASSED = "_daifu_passed"


class Handover(BaseException):
    """Unwinds a frame whose invocation a continuation takes over.

    A `BaseException`, so user code catching `Exception` never sees it; the transformed code lets
    it through every user handler, disarms `finally` clauses and guards on its way, and the
    function-level catcher runs the continuation.
    """

    def __init__(self, continuation: Any, namespace: dict[str, Any], started: float = 0.0, entry: Any = None,
                 rebind: Callable[[dict[str, Any]], None] | None = None) -> None:
        super().__init__()
        self.continuation = continuation
        self.namespace = namespace
        self.started = started  # `time.perf_counter()` at the crash, for the restore time
        self.entry = entry  # the record entry of the repair, ended when the continuation starts
        self.collecting = False  # whether to turn the garbage collector back on when the run resumes
        # Under the prototype's scope model, what binds again the module globals (the function's
        # variables) that the frame's unwinding unbound (`SeedScope.rebind`).
        self.rebind = rebind
        # What lets go of memory the crash left held, once the crashed frame has unwound (out of memory:
        # `daifu.core.cuda.release`).
        self.release: Callable[[], None] | None = None

    def start(self) -> dict[str, Any]:
        """The locals to resume with (handed over once); the repair's record ends here.

        Called once the crashed frame has unwound: the unwinding of an `except ... as name`
        handler unbinds its name, as leaving a handler does, although the run resumes inside it;
        a snapshot of locals keeps it, and a function whose variables are module globals has them
        bound again from the snapshot here (`rebind`). The restore time runs from the crash to this
        point, the record's own lines included.
        """
        self.__context__ = self.__traceback__ = None
        namespace, self.namespace = self.namespace, {}
        if self.rebind is not None:
            self.rebind(namespace)
        if self.release is not None:
            self.release()
        if self.entry is not None:
            self.entry.resumed(self.started)
        if self.collecting:
            gc.enable()
        return namespace


LEAVES_FRAMES_OUT = sys.version_info >= (3, 11)
"""Whether a bare `raise` re-raises an exception with its own `__traceback__` (since Python 3.11), so that a
frame can leave itself out of it (`unseen`); on 3.10 it re-raises the traceback its handler caught."""


def unseen(error: BaseException) -> None:
    """Leave the calling frame out of the traceback of `error`, which it heads, before a bare `raise`.

    The frame of a repaired call that runs its continuations, and a surgery's stub that calls the new
    code, are DaiFu's: an exception leaving the call shows the frames it would show without DaiFu (the
    continuation's, where the user's statement raised), not one more at the `def` line."""
    head = error.__traceback__
    if head is not None and head.tb_next is not None and head.tb_frame is sys._getframe(1):
        error.__traceback__ = head.tb_next


def mark_passed(error: BaseException) -> None:
    """Let `error` propagate untouched through every vaccinated frame from now on."""
    try:
        setattr(error, _PASSED, True)
    except AttributeError:  # an exception class with __slots__ and no __dict__
        pass


def is_passed(error: BaseException) -> bool:
    """Whether `error` was given up on (a `Raise` decision) or raised by a context manager's exit."""
    return bool(getattr(error, _PASSED, False))


def no_protocol(manager: Any) -> None:
    """A `with` on an object that is no context manager: raise what this Python's `with` raises (an
    `AttributeError` on 3.10, a `TypeError` since, with wordings that differ) by running one, which
    fails at the method lookup, before any method is called."""
    with manager:
        pass
    raise TypeError(f"'{type(manager).__name__}' object does not support the context manager protocol")


def exited(exit_method: Any, manager: Any, error: BaseException | None) -> bool:
    """Call `__exit__` for `error` (`None`: the body finished); whether it suppressed `error`.

    An error raised by `__exit__` itself is marked passed: it is not resumable, re-running the
    statement would re-run the body.
    """
    try:
        if error is None:
            return bool(exit_method(manager, None, None, None))
        return bool(exit_method(manager, type(error), error, error.__traceback__))
    except BaseException as raised:
        if raised is not error:
            mark_passed(raised)
        raise


class Guard:
    """A `with` a continuation re-enters: entered already, it exits through the saved `__exit__`,
    except while a `Handover` passes through (the next continuation exits it)."""

    __slots__ = ("manager", "_exit")

    def __init__(self, manager: Any, exit_method: Any) -> None:
        self.manager = manager
        self._exit = exit_method

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> bool:
        if isinstance(value, Handover):
            return False
        return exited(self._exit, self.manager, value)
