"""`Guard`: the context manager the fast path puts around each `with`, and the pass mark.

A crash inside a `with` body can hand the rest of the invocation over to a continuation. The
frame that crashed then unwinds with a `Handover`, and its `with` must not exit: the
continuation, which finishes the body, exits it, once, through the same guard.
"""

from __future__ import annotations

import gc
from types import TracebackType
from typing import Any

_PASSED = "_daifu_passed"


class Handover(BaseException):
    """Unwinds a frame whose invocation a continuation takes over.

    A `BaseException`, so user code catching `Exception` never sees it; the transformed code lets
    it through every user handler, disarms `finally` clauses and guards on its way, and the
    function-level catcher runs the continuation.
    """

    def __init__(self, continuation: Any, namespace: dict[str, Any], started: float = 0.0, entry: Any = None) -> None:
        super().__init__()
        self.continuation = continuation
        self.namespace = namespace
        self.started = started  # `time.perf_counter()` at the crash, for the restore time
        self.entry = entry  # the record entry of the repair, ended when the continuation starts
        self.collecting = False  # whether to turn the garbage collector back on when the run resumes

    def start(self) -> dict[str, Any]:
        """The locals to resume with (handed over once); the repair's record ends here.

        The restore time runs from the crash to this point, the record's own lines included.
        """
        self.__context__ = self.__traceback__ = None
        namespace, self.namespace = self.namespace, {}
        if self.entry is not None:
            self.entry.resumed(self.started)
        if self.collecting:
            gc.enable()
        return namespace


def mark_passed(error: BaseException) -> None:
    """Let `error` propagate untouched through every vaccinated frame from now on."""
    try:
        setattr(error, _PASSED, True)
    except AttributeError:  # an exception class with __slots__ and no __dict__
        pass


def is_passed(error: BaseException) -> bool:
    """Whether `error` was given up on (a `Raise` decision) or raised by a context manager's exit."""
    return bool(getattr(error, _PASSED, False))


class Guard:
    """Wraps a context manager; its exit is skipped while a `Handover` passes through."""

    __slots__ = ("manager", "_exit", "entered")

    def __init__(self, manager: Any) -> None:
        self.manager = manager
        self.entered = False

    def __enter__(self) -> Any:
        if self.entered:  # a continuation re-entering a `with` that is open already
            return None
        kind = type(self.manager)
        try:
            exit_method, enter_method = kind.__exit__, kind.__enter__
        except AttributeError:
            raise TypeError(f"'{kind.__name__}' object does not support the context manager protocol") from None
        value = enter_method(self.manager)
        self._exit = exit_method
        self.entered = True
        return value

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> bool:
        if isinstance(value, Handover):
            return False
        try:
            return bool(self._exit(self.manager, kind, value, traceback))
        except BaseException as error:
            if error is not value:
                mark_passed(error)  # an error of `__exit__` is not resumable: re-running it would rerun the body
            raise
