"""Calling user code that describes a value (`repr`, `str`, `len`, `__class__`) under a real deadline.

A crash report or a console describes the live values by calling into them; one call that never
returns would hold the crash handler, and the run with it, for ever. `bounded` therefore runs such a
call on a helper thread while the caller waits at most the given seconds. A call that overstays is
abandoned: the caller raises `TimedOut` and goes on, the helper is left to finish (or block) on its own
and is never handed work again. So neither a `__repr__` looping in Python nor one blocked in native code
(waiting on a lock or a socket, sleeping) can hold a crash longer than its deadline.

An abandoned call written in Python stops rather than spinning on: the caller, as it abandons the call,
hands each of the helper's frames running it a trace function that raises `TimedOut` at its next line,
and a function the helper calls after the deadline raises `TimedOut` as it is entered. Until then no
Python function runs per line in the helper (a trace per line was half a crash report's time). Where no
thread can be started (a trial's sandbox, interpreter shutdown), and in a bounded call nested in
another, nobody waits to abandon the call: it runs in its own thread under a trace that looks at the
clock at every line.
A call runs in a copy of the caller's context (`contextvars`), so context-bound settings still apply.

`budget(seconds)` caps the time of all the bounded calls made inside it: a report that meets fifty
blocked objects waits for the first and describes the others as timed out, without calling them.
"""

from __future__ import annotations

import contextvars
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, Generic, TypeVar

T = TypeVar("T")

DEFAULT_SECONDS = 0.5
_IDLE_HELPERS = 2
"""Helper threads kept waiting for work: one per thread that may describe values at the same time."""


class TimedOut(Exception):
    """A bounded call ran past its deadline."""


_budget: contextvars.ContextVar[float | None] = contextvars.ContextVar("daifu_bounded_budget", default=None)
_in_helper = threading.local()


@contextmanager
def budget(seconds: float) -> Iterator[None]:
    """Inside the block, every bounded call ends by `seconds` from now, whatever its own deadline."""
    end = time.monotonic() + seconds
    outer = _budget.get()
    token = _budget.set(end if outer is None else min(outer, end))
    try:
        yield
    finally:
        _budget.reset(token)


def bounded(function: Callable[..., T], *arguments: Any, seconds: float = DEFAULT_SECONDS) -> T:
    """`function(*arguments)`, raising `TimedOut` when it has not returned within `seconds` (or the budget)."""
    deadline = time.monotonic() + seconds
    outer = _budget.get()
    if outer is not None:
        deadline = min(deadline, outer)
    if time.monotonic() >= deadline:
        raise TimedOut(f"{_name(function)} not called: the time for describing values ran out")
    if getattr(_in_helper, "active", False):  # a call nested in a bounded call: already on a helper
        return _traced(function, arguments, deadline)
    helper = _Helper.take()
    if helper is None:
        return _traced(function, arguments, deadline)
    call: _Call[T] = _Call(function, arguments, deadline)
    helper.calls.put(call)
    if not call.done.wait(max(0.0, deadline - time.monotonic())) and call.abandon():
        _stop_at_next_line(helper.thread)
        raise TimedOut(f"{_name(function)} took more than {seconds:g} s")
    _Helper.give_back(helper)
    if call.error is not None:
        raise call.error
    return call.result  # type: ignore[return-value]  # set: the call finished without an error


def describe(value: Any, how: Callable[[Any], str] = repr, seconds: float = DEFAULT_SECONDS) -> str:
    """`how(value)` (by default `repr`), or a short note saying why it could not be had.

    A value that runs no code of the program's when described (a number, a string, a built-in exception
    holding only such values: most crashes' exceptions) is described at once, without a helper."""
    if how in (repr, str) and _plain(value):
        return how(value)
    try:
        return bounded(how, value, seconds=seconds)
    except TimedOut:
        return f"<{how.__name__} timed out>"
    except Exception as error:  # a user __repr__ may raise anything
        return f"<{how.__name__} failed: {type(error).__name__}>"


_PLAIN = frozenset({type(None), bool, int, float, complex, str, bytes})


def _plain(value: Any) -> bool:
    cls = type(value)
    if cls in _PLAIN:
        return True
    if issubclass(cls, BaseException) and cls.__module__ == "builtins":
        return all(type(argument) in _PLAIN for argument in value.args)  # a built-in class: its own `args`
    return False


def _name(function: Callable[..., Any]) -> str:
    return str(getattr(function, "__qualname__", function))


def _traced(function: Callable[..., T], arguments: tuple[Any, ...], deadline: float, lines: bool = True) -> T:
    """`function(*arguments)` in this thread, raising `TimedOut` in the first Python function entered after
    `deadline`, and (`lines`) at the first Python line run after it. Without `lines`, the trace is still
    on, so that a frame handed a trace function later (`_stop_at_next_line`) sees its next line."""
    previous = sys.gettrace()

    def watch(frame: FrameType, event: str, arg: Any) -> Any:
        if time.monotonic() > deadline:
            raise TimedOut(f"{_name(function)} ran past its deadline")
        return watch if lines else None

    sys.settrace(watch)
    try:
        return function(*arguments)
    finally:
        sys.settrace(previous)


def _stop(frame: FrameType, event: str, arg: Any) -> Any:
    raise TimedOut("abandoned: the call ran past its deadline")


def _stop_at_next_line(thread: threading.Thread) -> None:
    """Make each frame of the abandoned call the helper `thread` runs raise `TimedOut` at its next line:
    those above the helper's outermost `_traced`, where the call ends (none once it has ended)."""
    frame = sys._current_frames().get(thread.ident) if thread.ident is not None else None
    stack: list[FrameType] = []
    while frame is not None:
        stack.append(frame)
        frame = frame.f_back
    outermost = max((i for i, each in enumerate(stack) if each.f_code is _traced.__code__), default=0)
    for each in stack[:outermost]:
        each.f_trace = _stop


class _Call(Generic[T]):
    """One call handed to a helper, and what came of it; the waiter and the helper agree under a lock
    on whether it finished in time or was abandoned, so a helper is never reused after abandonment."""

    def __init__(self, function: Callable[..., T], arguments: tuple[Any, ...], deadline: float) -> None:
        self.function, self.arguments, self.deadline = function, arguments, deadline
        self.context = contextvars.copy_context()
        self.done = threading.Event()
        self.result: T | None = None
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._finished = self._abandoned = False

    def run(self) -> bool:
        """Run the call; whether it had been abandoned by the time it ended."""
        try:
            self.result = self.context.run(_traced, self.function, self.arguments, self.deadline, False)
        except BaseException as error:  # handed to the caller, who raises it
            self.error = error
        with self._lock:
            self._finished = True
            self.done.set()
            return self._abandoned

    def abandon(self) -> bool:
        """Give up waiting, unless the call finished meanwhile (then its result is used)."""
        with self._lock:
            self._abandoned = not self._finished
            return self._abandoned


class _Helper:
    """A daemon thread running the calls put in `calls`, one at a time, until one of them is abandoned."""

    _idle: list[_Helper] = []
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.calls: queue.SimpleQueue[_Call[Any]] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name="daifu-describe", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        _in_helper.active = True
        while not self.calls.get().run():
            pass

    @classmethod
    def take(cls) -> _Helper | None:
        """An idle helper, or a new one; None when no thread can be started."""
        with cls._lock:
            if cls._idle:
                return cls._idle.pop()
        try:
            return cls()
        except RuntimeError:  # "can't start new thread": a sandbox, a thread limit, shutdown
            return None

    @classmethod
    def give_back(cls, helper: _Helper) -> None:
        with cls._lock:
            if len(cls._idle) < _IDLE_HELPERS:
                cls._idle.append(helper)
                return
        helper.calls.put(_STOP)  # one too many idle: let it end

    @classmethod
    def forget(cls) -> None:
        """After a fork: the helpers' threads did not come along."""
        cls._idle = []
        cls._lock = threading.Lock()


class _Stop(_Call[None]):
    """The call that ends a helper."""

    def run(self) -> bool:
        return True


_STOP = _Stop(lambda: None, (), 0.0)

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_Helper.forget)
