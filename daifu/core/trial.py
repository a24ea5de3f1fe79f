"""Trials: a candidate repair tried on a copy of the live run before it touches the real one.

`run(decision, body, namespace, seconds)` forks the crashed process. The child (a copy-on-write
copy: same objects, same data, same point in the program) detaches itself from the live run
(`daifu.core.isolate`: shared memory made private, inherited files re-opened, pipes and sockets
sealed), limits its memory (`daifu.core.trial_memory`), installs the sandbox
(`daifu.core.sandbox`), captures its output, and calls `body`, which carries the decision out
through the runtime's own resume path with a *trial* continuation. The trial ends:

- when its *horizon* is over (`daifu.core.horizon`): past the interrupted iteration of the innermost
  enclosing loop, the copy runs up to `trial_iterations` more iterations of it (the trial continuation
  signals the end of the interrupted iteration, `iteration_over`, and the start of each next one,
  `iteration_started`), fewer when the next would not end within the trial's time; or when the loop
  ends, or the function returns: *completed*. Each iteration's facts (the repair's code run, work
  passed over, optimizer steps, losses, health) go into the verdict; the loop's next item that cannot
  be read in the copy (a data loader's worker pipes are sealed, `daifu.core.isolate`) ends the horizon
  there, and the verdict says so;
- at the first crash, vaccinated or not: *raised*, with the exception and the user's file:line;
- at an effect the sandbox stops (a file write, a collective, a system call not on its list, a
  write to shared memory it could only make read-only): *stopped at effect*; at an attempt to
  start a process or open a connection: *dangerous*;
- when the time budget runs out: *timed out* inside the interrupted iteration (the copy's own alarm,
  or the parent kills it); past it, the horizon ends there, and the verdict says so.

No trial starts when what it may dirty does not fit in the memory free (*unavailable: memory*).
At the end the child reads the run's health (`daifu.core.health`) and sends the verdict to the
parent through a pipe with its peak memory, then leaves with `os._exit`: no `finally` clause, no
`atexit` handler, no buffered output of the copy ever runs. The parent's state is never touched by
a trial.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import select
import signal
import sys
import sysconfig
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from types import FrameType
from typing import Any

from daifu import config
from daifu.core import cuda, health, isolate, sandbox, steps, trial_memory
from daifu.core.horizon import IterationFacts, judge, running_totals, summary
from daifu.core.step_horizon import Calls, Follower, StepReturned, returned_losses

_DAIFU = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RETURNED = "the function returned"
LOOP_ENDED = "the loop ended"
FRAMEWORK_ENDED = "the framework's loop ended"
GRACE_S = 2.0
"""Seconds the parent waits past the budget for the copy's own verdict (its alarm rings at the budget)."""


class Outcome(str, Enum):
    """How a trial ended."""

    COMPLETED = "completed"
    STOPPED_AT_EFFECT = "stopped at effect"
    RAISED = "raised"
    TIMED_OUT = "timed out"
    DANGEROUS = "dangerous"
    UNAVAILABLE = "unavailable"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Verdict:
    """What a trial found.

    detail: the exception (`Type: message`), the effect stopped, or why there was no trial.
    where: the user's file:line of a raised exception. spoilt: the trained state (or loss) that
    became non-finite; nonfinite: the locals holding non-finite values (often the bad batch itself).
    discarded: the trained state the repair threw away. losses_before/after: scalar losses (by
    name) before the crash and at the end of the trial. output: the end of what the copy printed.
    peak_bytes: the most memory the copy took beyond what it shared with the live run (0: not
    known). shared_memory: what was done to the shared memory of the live run (copied, made
    read-only; "" when there was none). isolated: all that detached the copy from the live run.
    reached: for an effect stopped, the places of code outside the libraries and DaiFu (the program's
    files, an action's `<daifu action N>`, a surgery's `file (surgery N)`) its traceback went through,
    outermost first, as `filename:line`: whose code reached it is for the decider to tell.
    iterations: what the copy saw in each iteration of the loop the crash was in (`daifu.core.horizon`):
    the rest of the crashed one (index 0), then up to `horizon` more. ended: why it saw no further
    (`""`: it saw the `horizon` asked, or the crash was in no loop). steps_before: the optimizer steps the
    program took before the crash (`None`: not counted). budget: the iterations in which the repair may
    pass over work (`pass_over_budget`). kind: `fork` (a sandboxed copy of the process) or `in-process`
    (`daifu.core.inprocess`: on the live objects, copied before and put back after); for the latter,
    snapshot_bytes, snapshot_ms and rollback_ms: what the copy of the state took, and putting it back;
    not_rolled_back: what the trial may have changed that could not be put back.
    """

    outcome: Outcome
    seconds: float = 0.0
    fork_ms: float = 0.0
    detail: str = ""
    where: str = ""
    spoilt: tuple[str, ...] = ()
    nonfinite: tuple[str, ...] = ()
    discarded: tuple[str, ...] = ()
    losses_before: Mapping[str, float] = field(default_factory=dict)
    losses_after: Mapping[str, float] = field(default_factory=dict)
    output: str = ""
    peak_bytes: int = 0
    shared_memory: str = ""
    isolated: str = ""
    reached: tuple[str, ...] = ()
    iterations: tuple[IterationFacts, ...] = ()
    horizon: int = 0
    ended: str = ""
    steps_before: int | None = None
    budget: int = 1
    kind: str = "fork"
    snapshot_bytes: int = 0
    snapshot_ms: float = 0.0
    rollback_ms: float = 0.0
    not_rolled_back: tuple[str, ...] = ()

    @property
    def healthy(self) -> bool:
        """It got through (or stopped only at an effect) with every value finite."""
        return self.outcome in (Outcome.COMPLETED, Outcome.STOPPED_AT_EFFECT) and not self.spoilt

    @property
    def refused(self) -> tuple[str, ...]:
        """Why the iterations the copy saw fail the repair (`daifu.core.horizon.judge`): work passed over
        past the budget, a loss gone non-finite or worse, state spoilt on the way; `()` when none."""
        return judge(self.iterations, self.budget, self.losses_before)

    @property
    def passed(self) -> bool:
        """Healthy, the trained state still there, and nothing wrong in the iterations past the crash: a
        repair automatic mode may apply."""
        return self.healthy and not self.discarded and not self.refused

    def seen(self) -> str:
        """How far the copy saw past the crash and what it saw there, one line (`""`: no loop to see)."""
        if not self.iterations:
            return ""
        return summary(self.iterations, self.ended, self.steps_before, self.losses_before)

    def describe(self, conclusion_first: bool = False) -> str:
        """One line for a person: `trial: iteration finished in 84 ms, loss 2.31, state kept`; with
        `conclusion_first`, why the horizon refused the repair comes before what the trial saw (a line
        a terminal cuts keeps it)."""
        took = f"{self.seconds * 1000:.0f} ms"
        if self.outcome is Outcome.COMPLETED:
            if self.detail == RETURNED:
                head = f"the call finished in {took}"
            else:
                head = f"iteration finished in {took}"
        elif self.outcome is Outcome.STOPPED_AT_EFFECT:
            head = f"ran {took} up to {self.detail} (stopped there, not done)"
        elif self.outcome is Outcome.RAISED:
            detail = self.detail if len(self.detail) <= 120 else self.detail[:117] + "..."
            head = f"raised {detail}" + (f" at {self.where}" if self.where else "")
        elif self.outcome is Outcome.TIMED_OUT:
            head = f"still running after {took}: stopped"
        elif self.outcome is Outcome.DANGEROUS:
            head = f"tried {self.detail}: dangerous"
        else:
            head = f"{self.outcome}: {self.detail}"
        parts = [head]
        if self.peak_bytes:
            parts.append(f"peak memory {trial_memory.size(self.peak_bytes)}")
        if self.shared_memory:
            parts.append(self.shared_memory)
        ran = self.outcome in (Outcome.COMPLETED, Outcome.STOPPED_AT_EFFECT)
        if self.losses_after and ran:
            parts.append(", ".join(f"{name} {value:.4g}" for name, value in self.losses_after.items()))
        if self.spoilt:
            parts.append(f"spoils the run: non-finite {', '.join(self.spoilt[:3])}")
        if self.outcome in (Outcome.COMPLETED, Outcome.STOPPED_AT_EFFECT, Outcome.RAISED):
            parts.append(f"discards trained state: {'; '.join(self.discarded)}" if self.discarded else "state kept")
        if self.kind == "in-process" and self.outcome is not Outcome.UNAVAILABLE:
            parts.append(f"in process (snapshot {trial_memory.size(self.snapshot_bytes)} in {self.snapshot_ms:.0f} ms, "
                         f"rolled back in {self.rollback_ms:.0f} ms)")
        if self.not_rolled_back:
            parts.append(f"not rolled back: {'; '.join(self.not_rolled_back)}")
        text = "trial: " + ", ".join(parts)
        seen = self.seen()
        if seen:
            text += f"; {seen}"
        refused = self.refused if self.healthy and not self.discarded else ()
        if refused and conclusion_first:
            return f"refused: {'; '.join(refused)}; {text}"
        if refused:
            text += f"; refused: {'; '.join(refused)}"
        return text

    def to_data(self) -> dict[str, Any]:
        data = asdict(self)
        data["outcome"] = self.outcome.value
        data["losses_before"], data["losses_after"] = dict(self.losses_before), dict(self.losses_after)
        data["iterations"] = [it.to_data() for it in self.iterations]
        return data

    @staticmethod
    def from_data(data: Mapping[str, Any]) -> Verdict:
        """The verdict `to_data` wrote (missing fields take their defaults)."""
        known = {name: data[name] for name in Verdict.__dataclass_fields__ if name in data}
        known["outcome"] = Outcome(known["outcome"])
        for name in ("spoilt", "nonfinite", "discarded", "reached", "not_rolled_back"):
            known[name] = tuple(known.get(name, ()))
        known["iterations"] = tuple(IterationFacts.from_data(it) for it in known.get("iterations", ()))
        return Verdict(**known)


FORK, IN_PROCESS = "fork", "in-process"


def unavailable() -> str | None:
    """Why no trial can run in this process now, or `None` when one can (`how`)."""
    kind, reason = how()
    return reason if kind is None else None


def how() -> tuple[str | None, str]:
    """Which trial runs here now, `fork` or `in-process`, and why not a fork trial (`""`: it is one);
    `(None, reason)` when none runs. The `trials` setting chooses: `fork` or `inprocess` only, `off`,
    or `auto`: a fork trial where one can run, else in process."""
    chosen = config.settings().trials
    if chosen == "off":
        return None, "trials are turned off (DAIFU_TRIALS=off)"
    if chosen == "inprocess":
        return IN_PROCESS, "the trials setting asks for in-process trials"
    reason = fork_unavailable()
    if reason is None:
        return FORK, ""
    if chosen == "fork":
        return None, reason
    return IN_PROCESS, reason


def fork_unavailable() -> str | None:
    """Why no trial can run in a forked copy of this process now, or `None` when one can."""
    if not hasattr(os, "fork"):
        return f"this platform ({sys.platform}) cannot fork a copy of the process"
    if cuda.initialised():
        return "CUDA is initialised in this process, and a CUDA context does not survive fork"
    return sandbox.unavailable()


View = Callable[[FrameType | None], Mapping[str, Any]]


class Ended(BaseException):
    """An in-process trial is over (`daifu.core.inprocess`): raised by `_send` from where it ended, with
    its verdict. A `BaseException`, so that the program's `except Exception` lets it through."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.outcome.value)
        self.verdict = verdict


def looking(seconds: float | None, horizon: int | None) -> _Horizon:
    """The horizon of a trial within `seconds` (default `trial_seconds`), `horizon` iterations past the
    crashed one (default `trial_iterations`); its deadline is set when the trial starts."""
    settings = config.settings()
    budget = seconds if seconds is not None else settings.trial_seconds
    ahead = settings.trial_iterations if horizon is None else max(int(horizon), 0)
    return _Horizon(ahead, budget, 0.0, steps.taken(), settings.pass_over_budget)


def run(decision: Any, body: Callable[[], Any], watched: Mapping[str, Any], view: View,
        seconds: float | None = None, horizon: int | None = None, calls: Calls | None = None) -> Verdict:
    """Try `decision` (carried out by `body`) in a sandboxed copy of this process, within `seconds`
    (by default the configured `trial_seconds`), looking `horizon` iterations past the crashed one
    (by default the configured `trial_iterations`; 0: the crashed iteration only).

    `watched` are the values whose health the verdict reports (the crashed frame's locals, the
    globals its function uses); `view(frame)` gives the same at the end of each iteration. Where the
    trial must run in process (`how`), the caller runs `daifu.core.inprocess.run` instead. `calls`: the
    crashed function is a framework's step, and the iterations past the crashed one are the framework's
    next calls of it (`daifu.core.step_horizon`).
    """
    kind, reason = how()
    if kind != FORK:
        return Verdict(Outcome.UNAVAILABLE, detail=reason if kind is None else f"no fork trial: {reason}")
    settings = config.settings()
    budget = seconds if seconds is not None else settings.trial_seconds
    ahead = settings.trial_iterations if horizon is None else max(int(horizon), 0)
    before = health.inventory(watched)
    need = trial_memory.estimate(before, watched)
    room = trial_memory.allowance(settings.trial_memory)
    if need.total > room.bytes:
        return Verdict(Outcome.UNAVAILABLE, detail=_too_large(need, room))
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    steps_before = steps.taken()
    read_end, write_end = os.pipe()
    capture = tempfile.TemporaryFile()
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork in a multi-threaded process
        pid = os.fork()
    if pid == 0:
        looking = _Horizon(ahead, budget, started + budget, steps_before, settings.pass_over_budget)
        state = _Child(before, view, started, need, room, looking, calls=calls)
        _child(read_end, write_end, capture.fileno(), body, state)  # never returns
    forked = time.perf_counter()
    os.close(write_end)
    try:
        return _wait(pid, read_end, capture, started, (forked - started) * 1000, budget)
    finally:
        os.close(read_end)
        capture.close()


def _too_large(need: trial_memory.Estimate, room: trial_memory.Allowance) -> str:
    size = trial_memory.size
    return (f"memory: the trial may need {size(need.total)} (trained state {size(need.rewritten)}, new gradients "
            f"{size(need.created)}, margin {size(need.margin)}), and {size(max(room.bytes, 0))} is {room.source}")


def _wait(pid: int, pipe: int, capture: Any, started: float, fork_ms: float, budget: float) -> Verdict:
    deadline = started + budget + GRACE_S  # the copy's own alarm rings at the budget, and it says what it saw
    received = b""
    timed_out, peak = False, 0
    try:
        while True:
            remaining = deadline - time.perf_counter()
            if remaining <= 0 or not select.select([pipe], [], [], remaining)[0]:
                timed_out, peak = True, trial_memory.peak(pid)
                break
            chunk = os.read(pipe, 1 << 16)
            if not chunk:
                break
            received += chunk
            if _whole(received) is not None:  # the copy is leaving: its exit is not waited for
                break
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        status = _reap(pid, wait=_whole(received) is None)
    elapsed = time.perf_counter() - started
    output = _tail(capture)
    data = _whole(received)
    if data is not None:
        try:
            return Verdict.from_data({**data, "fork_ms": fork_ms, "output": output})
        except (ValueError, KeyError, TypeError):
            pass
    if timed_out:
        return Verdict(Outcome.TIMED_OUT, elapsed, fork_ms, detail=f"no verdict within {budget:g} s", output=output,
                       peak_bytes=peak)
    how = f"signal {-os.waitstatus_to_exitcode(status)}" if os.WIFSIGNALED(status) else f"status {os.waitstatus_to_exitcode(status)}"
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:  # not by us: the verdict pipe had closed
        how += " (SIGKILL: most likely the kernel's OOM killer, whose first choice the trial is)"
    return Verdict(Outcome.FAILED, elapsed, fork_ms, detail=f"the trial process ended with {how}", output=output)


def _whole(received: bytes) -> dict[str, Any] | None:
    """The verdict the copy wrote (one JSON object, written last), once all of it has come; `None`
    before (a part of an object never parses) or when what came is no verdict."""
    if not received.rstrip().endswith(b"}"):
        return None
    try:
        data = json.loads(received.decode("utf-8", "replace"))
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _reap(pid: int, wait: bool) -> int:
    """The copy's wait status, once it has exited (`wait`); else 0, and a daemon thread reaps it: with
    its verdict in, the copy is only tearing down the process's memory, which took longer than the
    trial itself for a small model (the parent resumes meanwhile)."""
    if not wait:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        try:
            threading.Thread(target=os.waitpid, args=(pid, 0), name="daifu-reap", daemon=True).start()
            return 0
        except RuntimeError:  # no thread can be started (interpreter shutdown): wait here
            pass
    return os.waitpid(pid, 0)[1]


def _tail(capture: Any, limit: int = 2000) -> str:
    try:
        capture.seek(0, os.SEEK_END)
        size = capture.tell()
        capture.seek(max(0, size - limit))
        return capture.read().decode("utf-8", "replace")  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return ""


# -- the child ---------------------------------------------------------------------------------


@dataclass
class _Iteration:
    """The iteration of the loop the copy is in: its number (0: the crashed one), when it started, the
    optimizer steps counted then, and what the repair's code did in it so far."""

    index: int
    started: float
    steps: int | None
    fired: int = 0
    passed_over: int = 0
    what: list[str] = field(default_factory=list)
    rows: int = 0


@dataclass
class _Horizon:
    """How far past the crashed iteration the copy looks, and what it saw (`daifu.core.horizon`).

    asked: the iterations past the crashed one to see. seconds, deadline: the trial's time, and when
    it is up (`time.perf_counter()`). open: the iteration the copy is in (`None` between two: reading
    the loop's next item). seen: the facts of the iterations over. applied: the iteration in which the
    decision was last applied (a repeat of the crash in the same one: it does not get past it).
    """

    asked: int
    seconds: float
    deadline: float
    steps_before: int | None
    budget: int
    open: _Iteration | None = None
    seen: list[IterationFacts] = field(default_factory=list)
    last: int = -1
    applied: int = 0
    ended: str = ""
    returned: dict[str, float] | None = None
    """A framework's step (`daifu.core.step_horizon`): the losses the open iteration's call returned, once it did."""

    def current(self) -> _Iteration:
        """The open iteration; between two, the next one, opened now."""
        if self.open is None:
            self.open = _Iteration(self.last + 1, time.perf_counter(), steps.taken())
        return self.open


@dataclass
class _Child:
    """The state of the process a trial runs in."""

    before: health.Inventory
    view: View
    started: float
    need: trial_memory.Estimate
    room: trial_memory.Allowance
    horizon: _Horizon
    isolation: isolate.Isolation = field(default_factory=isolate.Isolation)
    limits: str = ""
    inprocess: bool = False
    """In process (`daifu.core.inprocess`): the verdict ends the trial as an exception, not the process."""
    calls: Calls | None = None
    """The crashed function is a framework's step: the copy follows the framework's next calls of it."""
    following: bool = False
    """The crashed call is over, and its value is on its way back to the framework (`_follow`)."""


_CHILD: list[_Child] = []


def active() -> bool:
    """Whether this process is a trial's copy."""
    return bool(_CHILD)


def _child(read_end: int, write_end: int, capture: int, body: Callable[[], Any], state: _Child) -> None:
    """The trial's copy of the process: sandbox, run, verdict, `os._exit`."""
    try:
        os.close(read_end)
        os.dup2(write_end, 0)  # the verdict goes out on fd 0, the output to the capture on 1 and 2:
        os.dup2(capture, 1)  # the sandbox lets a trial write to these three descriptors only
        os.dup2(capture, 2)
        os.close(write_end)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - whatever the program's streams were
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        _CHILD.append(state)
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.set_num_threads(1)  # an OpenMP pool does not survive fork: without this, a hang
        sandbox.quiet_distributed([held.obj for held in state.before.held])
        _detach(state)
        steps.install()  # counted in the copy even where the live run did not count them
        state.horizon.open = _Iteration(0, state.started, steps.taken())
        signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, max(state.horizon.deadline - time.perf_counter(), 0.001))
        sandbox.install(state.isolation.sealed, state.isolation.kept)
    except BaseException as error:  # noqa: BLE001 - anything here means no trial, said as such
        _send(Outcome.FAILED, detail=f"the sandbox could not be set up: {type(error).__name__}: {error}")
    try:
        value = body()
    except sandbox.SandboxStop as stop:
        crashed(stop, getattr(stop, "frame", None))
    except BaseException as error:  # noqa: BLE001
        crashed(error, None)
    if state.calls is not None and state.horizon.asked > 0:
        _follow(state, state.calls, value)
    _send(Outcome.COMPLETED, detail=RETURNED, finished=True)


def _follow(state: _Child, calls: Calls, value: Any) -> None:
    """The crashed call of a framework's step is over (child only): its value goes back up to the
    framework (`StepReturned`), whose next calls of the step are the iterations past the crash; never
    returns. An iteration runs from a call of the step to the next: what the framework does with what
    the step returned (its backward, its optimizer step) belongs to it; its losses are those the call
    returned and held in its locals then (`_step_returned`)."""
    state.horizon.returned = returned_losses(value)
    state.following = True
    Follower(calls, iteration_started, _step_returned, _framework_ended).install()
    raise StepReturned(value)


def _step_returned(frame: FrameType, returned: Mapping[str, float]) -> None:
    """A call of the framework's step past the crashed one returned `returned` (child only): the losses of
    its iteration, with those in its locals, noted when the next call starts it (`iteration_started`)."""
    child = _CHILD[0]
    child.horizon.returned = {**health.losses(child.view(frame)), **returned}


def _framework_ended(raised: bool) -> None:
    """The framework's call the program made is over (child only): its loop ended, or an exception left it."""
    looking = _CHILD[0].horizon
    if looking.open is not None:
        _close(None, complete=looking.returned is not None)
    if raised:
        _send(Outcome.RAISED, detail="an exception left the framework's loop past the crashed step")
    looking.ended = FRAMEWORK_ENDED
    _send(Outcome.COMPLETED, detail=FRAMEWORK_ENDED)


def step_lost() -> None:
    """The decision was made again in a trial's copy that was to hand the crashed step's value back to the
    framework (child only): a layer in between kept it; the trial ends with what it saw. Never returns
    in a copy that was following; returns in any other process."""
    if _CHILD and _CHILD[0].following:
        _send(Outcome.FAILED, detail="the trial could not hand the repaired step's value back to the framework")


def _detach(state: _Child) -> None:
    """Share nothing writable with the live run, and take no more memory than it can spare.

    Shared memory is copied as far as the room left after the estimate allows (the rest made
    read-only); new allocations are capped at the room less the state the trial may rewrite and
    the copies made.
    """
    isolation = state.isolation
    collecting = gc.isenabled()
    gc.disable()  # no tensor freed, no descriptor closed under the copy's feet (`daifu.core.isolate`)
    try:
        isolate.detach_descriptors((0, 1, 2), isolation)
        isolate.detach_memory(state.room.bytes - state.need.total, isolation)
    finally:
        if collecting:
            gc.enable()
    isolate.stop_on_write(isolation.read_only,
                          lambda effect: _send(Outcome.STOPPED_AT_EFFECT, detail=effect, reached=_stack_reached()))
    copied = sum(region.size for region in isolation.copied)
    state.limits = trial_memory.limit(state.room.bytes - state.need.rewritten - copied)


def iteration_over(frame: FrameType) -> None:
    """The trial continuation reached the end of the interrupted iteration (child only): its facts
    are noted, and the copy goes on to the next iteration unless its horizon is over."""
    if _CHILD:
        _close(frame, complete=True)
        _go_on(frame)


def iteration_started(frame: FrameType) -> None:
    """An iteration past the interrupted one starts (child only): the one before it is over."""
    if not _CHILD:
        return
    looking = _CHILD[0].horizon
    if looking.open is not None:
        _close(frame, complete=True)
        _go_on(frame)
    looking.current()
    looking.returned = None


def loop_over(frame: FrameType) -> None:
    """The loop the trial looked along is over (child only): a normal end of its horizon."""
    if _CHILD:
        _close(frame, complete=True)
        _CHILD[0].horizon.ended = LOOP_ENDED
        _send(Outcome.COMPLETED, detail=LOOP_ENDED, frame=frame)


def code_ran() -> None:
    """The repair's own code ran (child only): a surgery's statements entered."""
    if _CHILD:
        _CHILD[0].horizon.current().fired += 1


def passed_over(what: str, rows: int = 0) -> None:
    """The repair's code passed over work (child only): `what`, and the rows of a batch it left out."""
    if _CHILD:
        it = _CHILD[0].horizon.current()
        it.passed_over += 1
        it.what.append(what)
        it.rows += rows


def withheld(iterator: Any, frame: FrameType | None) -> None:
    """In process: the loop's next item would be taken from the live run's `iterator`, which a trial
    does not advance (`daifu.core.inprocess.Withheld`): its horizon ends here. Never returns."""
    _CHILD[0].horizon.ended = (f"the next item: an in-process trial does not take it from the live run's "
                               f"{type(iterator).__name__}")
    _send(Outcome.COMPLETED, frame=frame)


def in_process() -> bool:
    """Whether this trial runs in process (`daifu.core.inprocess`): on the live objects, which it must not
    change beyond what its rollback puts back."""
    return bool(_CHILD) and _CHILD[0].inprocess


def may_apply_again() -> bool:
    """Whether a repeat of the crash tried may have the decision applied again in the copy (child only),
    as the real run would: not when it was applied in this same iteration (it did not get past it)."""
    if not _CHILD:
        return False
    looking = _CHILD[0].horizon
    return looking.current().index > looking.applied


def applied(what: str | None, rows: int = 0, dropped: str = "") -> None:
    """The decision was applied (child only): `what` it passes over by its kind, the rows it dropped."""
    if not _CHILD:
        return
    looking = _CHILD[0].horizon
    it = looking.current()
    it.fired += 1
    looking.applied = it.index
    if what:
        passed_over(what)
    if rows:
        passed_over(dropped, rows)


def _close(frame: FrameType | None, complete: bool) -> health.Health | None:
    """Note the facts of the open iteration, ended (`complete`) or not; a framework's step's losses are
    those its call returned (`_step_returned`), not those of `frame`. Returns the health it read (`None`
    when no iteration was open): the verdict made right after reads the same, and takes it."""
    child = _CHILD[0]
    looking = child.horizon
    it = looking.open
    if it is None:
        return None
    looking.open = None
    found = health.examine(child.before, child.view(frame) if frame is not None else None)
    taken = steps.taken()
    looking.seen.append(IterationFacts(
        it.index, complete, time.perf_counter() - it.started, it.fired, it.passed_over, tuple(it.what), it.rows,
        None if taken is None or it.steps is None else taken - it.steps,
        dict(found.losses_after if looking.returned is None else looking.returned),
        tuple(found.spoilt), tuple(found.discarded), tuple(found.untrained),
    ))
    looking.last = it.index
    return found


def _go_on(frame: FrameType | None) -> None:
    """End the trial when its horizon is over: the iterations asked seen, or no time for one more (the
    longest seen so far)."""
    looking = _CHILD[0].horizon
    if looking.last >= looking.asked:
        _send(Outcome.COMPLETED, frame=frame)
    longest = max((it.seconds for it in looking.seen), default=0.0)
    if time.perf_counter() + longest > looking.deadline:
        looking.ended = f"the next iteration would not end within the trial's {looking.seconds:g} s"
        _send(Outcome.COMPLETED, frame=frame)


def _alarm(signal_number: int, frame: FrameType | None) -> None:
    """The trial's time is up (child only): inside the crashed iteration it timed out; past it (or once
    the crashed call of a framework's step returned), its horizon ends where the copy is, and the
    verdict says so."""
    if not _CHILD or _SENDING:
        return
    looking = _CHILD[0].horizon
    seconds = f"{looking.seconds:g} s"
    if looking.open is None and looking.last >= 0:
        looking.ended = f"the loop's next item did not come within the trial's {seconds}{_sealed()}"
        _send(Outcome.COMPLETED)
    if looking.open is not None and looking.returned is not None:  # a framework's step returned: its call is over
        _close(None, complete=True)
        looking.ended = f"the trial's {seconds} ran out before the framework's next call of the step"
        _send(Outcome.COMPLETED)
    if looking.open is not None and looking.open.index >= 1:
        looking.ended = f"the trial's {seconds} ran out in iteration {looking.open.index} past the crash"
        _send(Outcome.COMPLETED)
    _send(Outcome.TIMED_OUT, detail=f"no verdict within {seconds}")


def _sealed() -> str:
    """Why the copy may not read the loop's data: the inherited pipes and sockets it sealed."""
    sealed = len(_CHILD[0].isolation.sealed)
    if not sealed:
        return ""
    return (f" ({sealed} inherited pipes or sockets are sealed in the copy: a data loader's worker processes "
            "cannot be read from it)")


def crashed(error: BaseException, frame: FrameType | None, fetching: bool = False) -> None:
    """The trial met an exception: its verdict (child only); never returns. `fetching`: it came from the
    header of the loop the trial looks along, after the crashed iteration — its next item could not be
    had in the copy, which ends the horizon there (not the repair's doing, and not seen)."""
    looking = _CHILD[0].horizon if _CHILD else None
    if fetching and looking is not None and looking.last >= 0 and not isinstance(error, sandbox.SandboxStop):
        _close(frame, complete=True)
        looking.ended = f"the loop's next item could not be read in the copy ({_text(error)[:200]}){_sealed()}"
        _send(Outcome.COMPLETED, frame=frame)
    if isinstance(error, sandbox.SandboxStop):
        _send(Outcome.DANGEROUS if error.dangerous else Outcome.STOPPED_AT_EFFECT, detail=error.effect, frame=frame,
              reached=_reached(error))
    if sandbox.caused(error):
        _send(Outcome.STOPPED_AT_EFFECT, detail=f"an effect the sandbox refused ({_text(error)})",
              where=_where(error), frame=frame, reached=_reached(error))
    _send(Outcome.RAISED, detail=_text(error), where=_where(error), frame=frame)


def _text(error: BaseException) -> str:
    try:
        message = str(error)
    except Exception:
        message = "<str() failed>"
    return f"{type(error).__name__}: {message}"[:500]


def _where(error: BaseException) -> str:
    """The deepest place in the user's own code that the exception's traceback went through."""
    entries = traceback.extract_tb(error.__traceback__)
    own = [e for e in entries if own_code(e.filename)]
    chosen = (own or entries)[-1:]
    return f"{os.path.basename(chosen[0].filename)}:{chosen[0].lineno}" if chosen else ""


def own_code(filename: str) -> bool:
    """Whether `filename` is code outside the standard library, the installed packages and DaiFu."""
    return not filename.startswith(_libraries())


@functools.cache
def _libraries() -> tuple[str, ...]:
    """The folders of the standard library, the installed packages and DaiFu (read once: `sysconfig` is slow)."""
    found = {sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return (*sorted(path for path in found if path), _DAIFU)


def _reached(error: BaseException, limit: int = 40) -> tuple[str, ...]:
    """The places outside the libraries and DaiFu that `error` went through, and the exceptions it was
    raised from or during down to the sandbox's own refusal, outermost first: where an effect was
    reached from. (Not further: what was being handled then — the crash itself — reached nothing.)"""
    found: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        found += [f"{e.filename}:{e.lineno}" for e in traceback.extract_tb(current.__traceback__) if own_code(e.filename)]
        if isinstance(current, sandbox.SandboxStop) or _refused_by_sandbox(current):
            break
        current = current.__cause__ or current.__context__
    return tuple(dict.fromkeys(found))[:limit]


def _stack_reached(limit: int = 40) -> tuple[str, ...]:
    """`_reached` for an effect stopped where no exception is raised (a write to read-only shared
    memory): the places outside the libraries and DaiFu on the stack now, outermost first."""
    found: list[str] = []
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if own_code(frame.f_code.co_filename):
            found.append(f"{frame.f_code.co_filename}:{frame.f_lineno}")
        frame = frame.f_back
    return tuple(dict.fromkeys(reversed(found)))[:limit]


def _refused_by_sandbox(error: BaseException) -> bool:
    """Whether `error` itself (not its chain) is the seccomp filter's refusal."""
    try:
        marker = os.strerror(sandbox.SANDBOX_ERRNO)
        return getattr(error, "errno", None) == sandbox.SANDBOX_ERRNO or marker in str(error)
    except Exception:  # noqa: BLE001 - an error whose message cannot be made is not known to be the sandbox's
        return False


_SENDING: list[bool] = []
"""Set once the verdict is being written: the alarm then leaves it alone."""


def _send(outcome: Outcome, detail: str = "", where: str = "", frame: FrameType | None = None,
          reached: tuple[str, ...] = (), finished: bool = False) -> None:
    """End the trial with its verdict: in a copy, write it to the parent and leave the process at once;
    in process, raise it (`daifu.core.inprocess.Ended`) to the trial's caller. An iteration still open is
    noted as ended only when the function `finished` (returned) inside it."""
    _SENDING.append(True)
    if in_process():
        try:
            verdict = _verdict(outcome, detail, where, frame, reached, finished)
        except Exception as error:  # noqa: BLE001 - a verdict that cannot be made is a failed trial
            verdict = Verdict(Outcome.FAILED, detail=f"verdict: {error!r}"[:300])
        raise Ended(verdict)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0)
        verdict = _verdict(outcome, detail, where, frame, reached, finished)
        os.write(0, json.dumps(verdict.to_data(), default=str).encode())
    except BaseException as error:  # noqa: BLE001 - a verdict that cannot be read is a failed trial
        try:
            os.write(0, json.dumps({"outcome": "failed", "detail": f"verdict: {error!r}"[:300]}).encode())
        except BaseException:  # noqa: BLE001
            pass
    finally:
        os._exit(0)


def _verdict(outcome: Outcome, detail: str, where: str, frame: FrameType | None, reached: tuple[str, ...],
             finished: bool) -> Verdict:
    """The verdict of the trial as it ends: the open iteration closed, the health read."""
    child = _CHILD[0]
    looking = child.horizon
    if finished and not looking.ended and looking.open is not None:
        looking.ended = RETURNED
    closed = _close(frame, complete=finished)
    seconds = time.perf_counter() - child.started
    peak = 0 if child.inprocess else trial_memory.peak()
    found = closed if closed is not None and frame is not None else health.examine(child.before, child.view(frame))
    totals = running_totals(frame.f_code if frame is not None else None)
    judged = {name: value for name, value in found.losses_before.items() if name not in totals}
    return Verdict(
        outcome, seconds, 0.0, detail, where, tuple(found.spoilt), tuple(found.nonfinite),
        tuple(found.discarded), judged, found.losses_after, peak_bytes=peak,
        shared_memory=child.isolation.shared_memory(),
        isolated="; ".join(part for part in (child.isolation.describe(), child.limits) if part),
        reached=reached, iterations=tuple(looking.seen), horizon=looking.asked, ended=looking.ended,
        steps_before=looking.steps_before, budget=looking.budget,
    )
