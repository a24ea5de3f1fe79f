"""Preemption: a signal (`rescue_on`) takes a rescue at the next statement of a vaccinated function.

A scheduler that preempts a job sends SIGTERM (Slurm, Kubernetes, torchrun passing it on) or a signal
it was told to (`--signal=USR1@120`), then waits a grace period before it kills. With
`daifu.configure(rescue_on=["SIGTERM", "SIGUSR1"])` (or `DAIFU_RESCUE_ON=SIGTERM,SIGUSR1`) DaiFu's
handler of those signals does nothing in the handler itself, where the training state may be half
updated (inside `optimizer.step()`), but waits for the innermost vaccinated function on the stack to
start its next statement: there no call it made is running, and its trained state is whole. It takes
the rescue there (`daifu.rescue.save.at_signal`), then lets the signal have the effect it had before
DaiFu's handler: the handler the program installed runs, an ignored signal stays ignored, and a signal
whose default ends the process ends it, with the signal's exit status.

How it waits costs nothing before a signal arrives: the handler sets a trace function on that one frame
(and turns tracing on for the thread, if no other tool had it on), which sees each line it starts; the
trace goes away at the rescue. A line is taken as a statement's start when a statement of the function
begins on it and the frame does not come back to it from a later line of the same statement (a call's
arguments written below it). A function that returns before starting another statement is rescued as
it returns. A second signal while waiting has its effect at once; so has a signal that finds no
vaccinated function running (it says so). Only the main thread receives signals, so only a training loop
run by the main thread is rescued this way.
"""

from __future__ import annotations

import ast
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from daifu import config
from daifu.core.helpers import Helpers
from daifu.say import say, say_once
from daifu.store import record

Trace = Callable[[FrameType, str, Any], Any]

_previous: dict[int, Any] = {}
"""The handler of each signal DaiFu took over, as it was before: what the signal does after the rescue."""
_waiting: dict[str, Any] = {}
"""The signal waiting for a statement to start (`signal`), and how to stop waiting (`stop`)."""


def arm() -> None:
    """Make the handlers match `rescue_on`: take over the signals it names, give back the others."""
    wanted = {int(getattr(signal, name)) for name in config.settings().rescue_on}
    try:
        for number in [n for n in _previous if n not in wanted]:
            signal.signal(number, _previous.pop(number))
        for number in wanted - set(_previous):
            _previous[number] = signal.signal(number, _handler)
    except ValueError as error:  # not the main thread: Python lets only it install handlers
        say_once(f"rescue_on: the signal handlers could not be installed ({error}); configure it from the main "
                 "thread")


def _handler(number: int, frame: FrameType | None) -> None:
    try:
        waiting = _waited(number, frame)
    except Exception as error:  # a bug of ours must not stop the signal, nor raise into the program
        say(f"{signal.Signals(number).name}: DaiFu failed to prepare the rescue ({type(error).__name__}: {error}); "
            f"nothing rescued; {_effect(number)}")
        waiting = False
    if not waiting:
        _proceed(number, frame)


def _waited(number: int, frame: FrameType | None) -> bool:
    """Start waiting for a statement to start, to rescue there; `False` when the signal should act now."""
    name = signal.Signals(number).name
    if _waiting:  # a second signal: the person or the scheduler will not wait
        _waiting.pop("stop")()
        say(f"{name} again before a statement started: nothing rescued; {_effect(number)} now")
        return False
    found = _vaccinated(frame)
    if found is None:
        say(f"{name}: no vaccinated function is running in the main thread; nothing rescued; {_effect(number)}")
        return False
    target, version = found
    _wait(target, version, number)
    return True


def _vaccinated(frame: FrameType | None) -> tuple[FrameType, Any] | None:
    """The innermost frame running a vaccinated function's code, and the `Version` it runs."""
    while frame is not None:
        version = _version(frame)
        if version is not None:
            return frame, version
        frame = frame.f_back
    return None


def _version(frame: FrameType) -> Any:
    """The `Version` whose compiled code `frame` runs: its `@rt` constant leads to the function's runtime."""
    for constant in frame.f_code.co_consts:
        if isinstance(constant, Helpers):
            runtime = getattr(constant.crash, "__self__", None)
            return getattr(runtime, "units", {}).get(id(frame.f_code))
    return None


def _statement_starts(fdef: ast.FunctionDef) -> dict[int, int]:
    """For each line a statement of the function starts on, the last line of its header (a simple
    statement's last line; a compound one's lines before its first block)."""
    starts: dict[int, int] = {}
    for node in ast.walk(fdef):
        if isinstance(node, ast.stmt) and node is not fdef:
            blocks = [getattr(node, name, None) for name in ("body", "handlers", "orelse", "finalbody", "cases")]
            first = min((block[0].lineno for block in blocks if isinstance(block, list) and block), default=None)
            end = first - 1 if first is not None else (node.end_lineno or node.lineno)
            starts[node.lineno] = max(starts.get(node.lineno, node.lineno), end)
    return starts


def _wait(target: FrameType, version: Any, number: int) -> None:
    """Trace `target` (running `version`) until it starts a statement or returns, then rescue and let
    the signal act."""
    starts = _statement_starts(version.fdef)
    last = [target.f_lineno]
    outer, inner = sys.gettrace(), target.f_trace
    chained: list[Trace | None] = [inner]

    def starting(line: int) -> bool:
        return line in starts and not line < last[0] <= starts[line]

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        trace = chained[0]
        if trace is not None:  # the tool that traced this frame before keeps seeing its events
            chained[0] = trace(frame, event, arg)
        if (event == "line" and starting(frame.f_lineno)) or event == "return":
            stop()
            _rescue(frame, version.source, number)
            return chained[0]
        if event == "line":
            last[0] = frame.f_lineno
        return local

    def stop() -> None:
        target.f_trace = chained[0]
        if outer is None:
            sys.settrace(None)
        _waiting.clear()

    _waiting.update(signal=number, stop=stop)
    target.f_trace = local
    if outer is None:
        sys.settrace(_new_frames)


def _new_frames(frame: FrameType, event: str, arg: Any) -> None:
    """The thread's trace while waiting: frames that start meanwhile are not traced."""
    return None


def _rescue(frame: FrameType, source: str, number: int) -> None:
    """Rescue `frame` for signal `number`, then let the signal act, whatever became of the rescue."""
    name = signal.Signals(number).name
    then = f"{name} then {_effect(number)}"
    try:
        _save(frame, source, name, then)
    except Exception as error:  # a bug of ours must not stop the signal, nor raise into the program
        say(f"{name}: DaiFu failed to rescue the trained state ({type(error).__name__}: {error}); {then}")
    _proceed(number, frame)


def _save(frame: FrameType, source: str, name: str, then: str) -> None:
    from daifu.rescue import save

    settings = config.settings()
    if not settings.rescue:
        say(f"{name}: the rescue is off (rescue=False, DAIFU_RESCUE); {then}")
        return
    where = save.at_signal(frame, source, name, then, settings)
    if where is not None:
        record.note(f"{name}: the trained state is rescued in {where}")


def _effect(number: int) -> str:
    """What the signal does once DaiFu let it go, in words."""
    previous = _previous.get(number, signal.SIG_DFL)
    if previous is signal.SIG_IGN:
        return "is ignored, as before"
    if callable(previous):
        return "goes to the program's own handler"
    return "ends the run"


def _proceed(number: int, frame: FrameType | None) -> None:
    """Let the signal have the effect it had without DaiFu."""
    previous = _previous.get(number, signal.SIG_DFL)
    if previous is signal.SIG_IGN:
        return
    if callable(previous):
        previous(number, frame)
        return
    signal.signal(number, signal.SIG_DFL)  # the default: delivered again, with nothing of ours in the way
    try:
        os.kill(os.getpid(), number)
    finally:
        signal.signal(number, _handler)  # reached when the default does not end the process
