"""The in-process trial: a candidate tried on the live objects, then everything it changed put back.

Where a forked copy cannot run a trial — a process that initialised CUDA (a CUDA context does not
survive `fork`), a platform without `fork` or seccomp, or by choice (`trials="inprocess"`) — the
candidate runs in the process itself:

1. `daifu.core.rollback.take` copies what the candidate may change (trained state, random
   generators, the locals' tensors and containers, the module globals, the runtime's own state);
   when the copy does not fit, the verdict is *unavailable: memory* and nothing ran;
2. the candidate is carried out through the same resume path as a fork trial's (the trial
   continuation, `daifu.core.trial`'s horizon), under the audit-hook layer of the sandbox
   (`daifu.core.sandbox.guarded`: a file written, `torch.save` to a path, a process, a connection,
   a collective are stopped before they happen), its output captured, within the trial's time
   (a `SIGALRM`, in the main thread only); a graph the run built before the crash is kept whole
   through the trial's backward passes (`daifu.core.kept_graph`), which would otherwise free it;
3. the loop's iterator is never advanced: a builtin iterator over a sequence (`range`, a list, a
   tuple) is replaced in the trial by a copy of itself, so the horizon looks along the loop; any
   other (a data loader's) ends the trial where the loop would take its next item, which the verdict
   says (`Withheld`);
4. the trial ends by raising its verdict (`Ended`) from wherever it ends; the snapshot is put back
   and the verdict returned, with the time the snapshot and the rollback took and what could not be
   rolled back (an iterator a local holds, which the candidate's code could advance; a `finally`
   clause or a `with` block's exit around where the trial ended, which runs as the trial unwinds).
"""

from __future__ import annotations

import contextlib
import copy
import io
import operator
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from types import FrameType
from typing import Any

from daifu.core import cuda, health, kept_graph, sandbox, trial, trial_memory
from daifu.core.rollback import Snapshot
from daifu.core.trial import IN_PROCESS, Ended, Outcome, Verdict

_SEQUENCES: tuple[Any, ...] = (range(0), range(1 << 64), [], (), "")
_COPYABLE_ITERATORS = tuple(type(iter(sequence)) for sequence in _SEQUENCES)
"""Iterators whose copy is independent of the original: a trial can look along the loop on a copy."""
OUTPUT_LIMIT = 2000


class Withheld:
    """A loop's iterator the trial may not advance: taking the next item from it ends the trial there,
    the item left to the live run."""

    def __init__(self, iterator: Any) -> None:
        self.iterator = iterator

    def __iter__(self) -> Withheld:
        return self

    def __next__(self) -> Any:
        trial.withheld(self.iterator, _caller())

    def __length_hint__(self) -> int:
        return operator.length_hint(self.iterator)


def _caller() -> FrameType | None:
    """The frame that asked a `Withheld` for its next item (the trial continuation's loop)."""
    return sys._getframe(2)


def hold(namespace: dict[str, Any]) -> None:
    """Make the iterators of `namespace` (a trial continuation's locals) safe to take from: a copy of a
    sequence's iterator, any other withheld. The loops' own (`@itN`), and those the program holds in its
    locals and advances itself (`batch = next(data_iter)`, minGPT's loop): a trial's horizon that took
    items from the live DataLoader would leave the real run without them. And the `with` statements the
    live run entered before the crash are not exited by the trial (`_left_open`): it closed the real
    run's file, which then failed with "I/O operation on closed file"; but torch's grad modes."""
    for name, value in list(namespace.items()):
        if value is None or isinstance(value, Withheld):
            continue
        loops = name.startswith("@it") and name[3:].isdigit()
        if loops or not name.startswith("@") and _live_iterator(value):
            namespace[name] = copy.copy(value) if type(value) in _COPYABLE_ITERATORS else Withheld(value)
        elif name.startswith("@ex") and name[3:].isdigit() and not _exit_may_run(namespace.get(f"@cm{name[3:]}")):
            namespace[name] = _left_open
        elif not name.startswith("@") and isinstance(value, io.IOBase) and not isinstance(value, Sealed):
            namespace[name] = Sealed(value)


class Sealed:
    """A file the live run holds open, as a trial's code sees it: what it is (its name, its mode) can be
    read, but a write, a read (which moves the live run's position), a seek or a close stops the trial
    there (`daifu.core.sandbox.SandboxStop`), as a write to an inherited descriptor stops a forked one."""

    _SEEN = frozenset({"name", "mode", "closed", "encoding", "errors", "newlines", "readable", "writable",
                       "seekable", "isatty", "fileno"})

    def __init__(self, stream: Any) -> None:
        object.__setattr__(self, "_stream", stream)

    def __getattr__(self, name: str) -> Any:
        stream = object.__getattribute__(self, "_stream")
        if name in Sealed._SEEN:
            return getattr(stream, name)
        raise sandbox.SandboxStop(f"{name} on the live run's open file {getattr(stream, 'name', '?')!r}",
                                  dangerous=False)

    def __iter__(self) -> Any:
        return self.__getattr__("__iter__")

    def __enter__(self) -> Any:
        return self.__getattr__("__enter__")


_GRAD_MODES = frozenset({"no_grad", "enable_grad", "set_grad_enabled"})
"""The managers whose exit a trial may run on the live run's `with`: they only set torch's grad mode back,
which the rollback restores (`Snapshot.grad_enabled`), and a second exit, the real run's, does the same."""


def _exit_may_run(manager: Any) -> bool:
    kind = type(manager)
    return kind.__module__ == "torch.autograd.grad_mode" and kind.__name__ in _GRAD_MODES


def _left_open(manager: Any, kind: Any, error: Any, tb: Any) -> bool:
    """The exit a trial runs for a `with` the live run entered before the crash: none. Its manager is the
    live run's (a file it writes, a lock it holds), and the real run exits it once, when its own body ends;
    the exception that ends the trial is not suppressed."""
    return False


def _live_iterator(value: Any) -> bool:
    """Whether `value` is an iterator (its own `iter`), not a file, which `next` would advance."""
    try:
        return hasattr(value, "__next__") and iter(value) is value and not isinstance(value, io.IOBase)
    except Exception:  # noqa: BLE001 - an object whose iter() fails is no iterator
        return False


def held_iterators(namespace: Mapping[str, Any]) -> list[str]:
    """The locals that hold an iterator of the live run the candidate's own code could advance."""
    found = []
    for name, value in health.reachable(namespace):
        if "[" in name or "." in name or isinstance(value, _COPYABLE_ITERATORS):
            continue
        if _live_iterator(value):
            found.append(f"the iterator in `{name}` (if the repair takes from it)")
    return found


def run(body: Callable[[], Any], watched: Mapping[str, Any], view: trial.View, take: Callable[[], Any],
        why: str, seconds: float | None = None, horizon: int | None = None) -> Verdict:
    """Try the candidate `body` carries out on the live objects, within `seconds`, looking `horizon`
    iterations past the crashed one (`daifu.core.trial.looking`); put back what `take` copied first (a
    `daifu.core.rollback.Snapshot`, or why none: then nothing runs); the verdict. `why`: why not in a fork.
    `body` makes its continuation's loop iterators safe with `hold`."""
    looking = trial.looking(seconds, horizon)
    snapshot = take()
    if not isinstance(snapshot, Snapshot):
        return Verdict(Outcome.UNAVAILABLE, detail=str(snapshot), kind=IN_PROCESS)
    output = io.StringIO()
    graph = kept_graph.built_before(watched)
    try:
        with kept_graph.kept(graph):
            verdict, timed = _tried(body, watched, view, looking, output)
    finally:  # a KeyboardInterrupt goes on, but only once everything is back
        started = time.perf_counter()
        snapshot.restore()
    rollback_s = time.perf_counter() - started
    isolated = f"in process ({why}): audit hooks stop the effects Python code asks for; no seccomp filter"
    lost = ("the CUDA context: the candidate raised a CUDA error that leaves it unusable",) \
        if cuda.poisoned_text(verdict.detail) else ()
    if not timed:
        isolated += "; no time limit (outside the main thread an in-process trial cannot be interrupted)"
    text = output.getvalue()
    return replace(verdict, kind=IN_PROCESS, snapshot_bytes=snapshot.bytes, snapshot_ms=snapshot.seconds * 1000,
                   rollback_ms=rollback_s * 1000, output=text[-OUTPUT_LIMIT:], isolated=isolated,
                   not_rolled_back=lost + tuple(held_iterators(watched)) + verdict.not_rolled_back)


def _tried(body: Callable[[], Any], watched: Mapping[str, Any], view: trial.View, looking: Any,
           output: io.StringIO) -> tuple[Verdict, bool]:
    """Run the trial; its verdict, however it ended, and whether it had a time limit. A `KeyboardInterrupt` (the person stops the run)
    goes on once the trial is over, as it would have in the live run."""
    started = time.perf_counter()
    looking.deadline = started + looking.seconds
    state = trial._Child(health.inventory(watched), view, started, trial_memory.Estimate(),
                         trial_memory.Allowance(0, ""), looking, inprocess=True)
    trial._CHILD.append(state)
    sandbox.quiet_distributed([held.obj for held in state.before.held])  # put back by the rollback
    tracing = sys.gettrace()  # a surgery's lines are counted by a trace function (`repair_path.LineCounter`)
    try:
        with sandbox.guarded(), _captured(output), _alarm(looking.seconds) as timed:
            looking.open = trial._Iteration(0, started, trial.steps.taken())
            try:
                try:
                    body()
                except (Ended, KeyboardInterrupt):
                    raise
                except sandbox.SandboxStop as stop:
                    trial.crashed(stop, getattr(stop, "frame", None))
                except BaseException as error:  # noqa: BLE001 - the candidate's failure is the verdict
                    trial.crashed(error, None)
                trial._send(Outcome.COMPLETED, detail=trial.RETURNED, finished=True)
            except Ended as ended:
                return ended.verdict, timed
        raise AssertionError("a trial ends with its verdict")  # `_send` always raises `Ended`
    finally:
        sys.settrace(tracing)
        trial._CHILD.clear()
        trial._SENDING.clear()


@contextlib.contextmanager
def _captured(output: io.StringIO) -> Iterator[None]:
    """What the trial prints goes to `output`, not the program's streams."""
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
        yield


@contextlib.contextmanager
def _alarm(seconds: float) -> Iterator[bool]:
    """The trial's own `SIGALRM` at `seconds` (`daifu.core.trial._alarm`), the program's own alarm and
    handler put back after; yields whether there is one (only the main thread can have it)."""
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    handler = signal.signal(signal.SIGALRM, trial._alarm)
    started = time.perf_counter()
    program_delay, program_interval = signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, handler)
        if program_delay > 0:
            left = max(program_delay - (time.perf_counter() - started), 0.001)
            signal.setitimer(signal.ITIMER_REAL, left, program_interval)
