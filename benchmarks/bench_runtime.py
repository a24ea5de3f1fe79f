"""Run-time overhead and restore time of vaccinated code, measured side by side in one run.

    python benchmarks/bench_runtime.py [--quick]

Prints: (1) a real CPU training loop (benchmarks/train100.py, 320 steps) plain vs vaccinated,
median of interleaved repeats; (2) the per-iteration cost of a tight Python loop plain vs
vaccinated, what a call of a one-line function and one execution of a `with` statement cost in
each (CPU time); (3) restore
time — from the exception to execution resuming — for Retry, Action and Surgery decided by a
policy on the 100-line training function, at the first crash at a site and at a repeated one (a
surgery resumes in a segment, the rest of the interrupted iteration: what it compiles when that
iteration ends is shown beside it; three surgeries: a one-line fix, one adding a line, one binding
a new local), the memory a first crash leaves behind, and for a ~1,000-line function, vaccination and restore times;
(4) what the same recovery costs by restarting from the last checkpoint (new process, import,
rebuild, load, redo the lost steps), and the ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
import warnings
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("DAIFU_RECORD", os.path.join(tempfile.mkdtemp(), "experiment_record.log"))
os.environ.setdefault("DAIFU_WORKSPACE", os.path.join(tempfile.mkdtemp(), "daifu_workspace"))

import daifu  # noqa: E402
from daifu.state import RUN  # noqa: E402
import train100  # noqa: E402



def fresh(fn: types.FunctionType) -> types.FunctionType:
    """A new function object with `fn`'s code: `daifu.transform` vaccinates the object it is given, in
    place, so each measurement vaccinates its own copy and `fn` itself stays plain."""
    return types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def no_fault(step: int) -> None:
    return None


def interleaved(plain, vaccinated, repeats: int) -> tuple[float, float, float]:
    """Median plain time, median vaccinated time, median of the per-pair ratios."""
    plain_times, vaccinated_times, ratios = [], [], []
    for index in range(repeats):
        pair = []
        for fn in (plain, vaccinated) if index % 2 == 0 else (vaccinated, plain):
            started = time.perf_counter()
            fn()
            pair.append((fn, time.perf_counter() - started))
        times = dict(pair)
        plain_times.append(times[plain])
        vaccinated_times.append(times[vaccinated])
        ratios.append(times[vaccinated] / times[plain])
    return statistics.median(plain_times), statistics.median(vaccinated_times), statistics.median(ratios)


def frame_instructions(fn, *args) -> int:
    """Bytecode instructions executed in `fn`'s own frame (not its callees): a count, not a time."""
    count = [0]

    def local(frame, event, arg):
        if event == "opcode":
            count[0] += 1
        return local

    def tracer(frame, event, arg):
        if frame.f_code is fn.__code__:
            frame.f_trace_opcodes = True
            return local
        return None

    sys.settrace(tracer)
    try:
        fn(*args)
    finally:
        sys.settrace(None)
    return count[0]


def training_overhead(repeats: int) -> None:
    vaccinated_train = daifu.transform(fresh(train100.train))
    twin = types.FunctionType(
        train100.train.__code__.replace(), train100.train.__globals__, "train", train100.train.__defaults__
    )
    model, optimizer, data = train100.build()

    def run(fn):
        return lambda: fn(model, optimizer, data, 20, no_fault)

    plain_s, vacc_s, ratio = interleaved(run(train100.train), run(vaccinated_train), repeats)
    _, _, control = interleaved(run(train100.train), run(twin), repeats)
    print(
        f"training loop, 320 steps: plain {plain_s * 1e3:.1f} ms, vaccinated {vacc_s * 1e3:.1f} ms, "
        f"overhead {100 * (ratio - 1):+.2f}% (median of {repeats} interleaved pairs; plain against plain, "
        f"the noise floor: {100 * (control - 1):+.2f}%)"
    )
    steps = 2 * len(data)
    plain_count = frame_instructions(train100.train, model, optimizer, data, 2, no_fault)
    vacc_count = frame_instructions(vaccinated_train, model, optimizer, data, 2, no_fault)
    print(
        f"  instructions executed in the training function's own frame: {(vacc_count - plain_count) / steps:+.1f} "
        f"per step ({plain_count / steps:.0f} plain), i.e. {100 * (vacc_count - plain_count) / plain_count:+.1f}% "
        "of the frame's own work, which is a tiny share of a step"
    )


def tight_loop(repeats: int) -> None:
    def loop(n):
        total = 0
        for i in range(n):
            total += i
        return total

    vaccinated = daifu.transform(fresh(loop))
    n = 1_000_000
    plain_s, vacc_s, ratio = interleaved(lambda: loop(n), lambda: vaccinated(n), repeats)
    print(
        f"tight loop: plain {plain_s / n * 1e9:.1f} ns/iteration, vaccinated {vacc_s / n * 1e9:.1f} ns/iteration, "
        f"x{ratio:.3f} ({(vacc_s - plain_s) / n * 1e9:+.1f} ns)"
    )


def one_line_calls(repeats: int) -> None:
    """What a call of a vaccinated one-line function costs more than a plain call: a loop of calls
    of each, paired, in CPU time per call."""

    def add(x):
        return x + 1

    def calls(fn, n):
        for i in range(n):
            fn(i)

    vaccinated = daifu.transform(fresh(add))
    n = 200_000
    extra = []
    for index in range(repeats):
        spent = {}
        for fn in (add, vaccinated) if index % 2 == 0 else (vaccinated, add):
            started = time.process_time()
            calls(fn, n)
            spent[fn] = (time.process_time() - started) / n * 1e9
        extra.append(spent[vaccinated] - spent[add])
    print(f"one-line function: {statistics.median(extra):+.1f} ns per call vaccinated (median of {repeats} pairs)")


class Manager:
    """The cheapest context manager written in Python (`contextlib.nullcontext` is one too)."""

    def __enter__(self) -> Manager:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def with_statement(repeats: int) -> None:
    """The cost of one `with` execution: a loop with a `with` in its body minus the same loop
    without, plain and vaccinated, in CPU time (a busy machine's other work stays out), paired."""

    def with_body(n, manager):
        total = 0
        for i in range(n):
            with manager:
                total += i
        return total

    def bare(n, manager):
        total = 0
        for i in range(n):
            total += i
        return total

    n, runs = 200_000, {"plain with": with_body, "plain bare": bare}
    runs |= {"vaccinated with": daifu.transform(fresh(with_body)), "vaccinated bare": daifu.transform(fresh(bare))}
    for manager in (Manager(), contextlib.nullcontext()):
        per_run: list[dict[str, float]] = []
        for index in range(repeats):
            spent = {}
            for name, fn in list(runs.items())[:: 1 if index % 2 == 0 else -1]:
                started = time.process_time()
                fn(n, manager)
                spent[name] = (time.process_time() - started) / n * 1e9
            per_run.append(spent)
        plain = statistics.median(r["plain with"] - r["plain bare"] for r in per_run)
        vaccinated = statistics.median(r["vaccinated with"] - r["vaccinated bare"] for r in per_run)
        extra = statistics.median(
            (r["vaccinated with"] - r["vaccinated bare"]) - (r["plain with"] - r["plain bare"]) for r in per_run
        )
        print(f"with {type(manager).__name__}(): plain {plain:.0f} ns, vaccinated {vaccinated:.0f} ns per execution, "
              f"{extra:+.0f} ns (median of pairs)")


class FaultAt:
    def __init__(self, step: int) -> None:
        self.step, self.fired = step, False

    def __call__(self, step: int) -> None:
        if step == self.step and not self.fired:
            self.fired = True
            raise ConnectionResetError("collective timed out (injected)")


def timed_switches(function: Any, into: list[float]) -> None:
    """Collect the CPU milliseconds of each switch out of a segment of vaccinated `function`: what
    the switch compiles (the rest of the call, the new version's fast path) when the interrupted
    iteration ends, the part of a surgery's work that comes after the resume."""
    helpers = function.__daifu__.helpers
    switch = helpers.switch

    def timed(*arguments: Any) -> None:
        started = time.thread_time()
        try:
            switch(*arguments)
        finally:
            into.append((time.thread_time() - started) * 1e3)

    helpers.switch = timed


def restore_times(runs: int, crash_step: int, switches: list[float]) -> dict[str, list[float]]:
    """Milliseconds from the exception to the resume, per decision, cold (new site) and warm; the
    switches' compile times of the surgeries go to `switches`."""
    source = inspect.getsource(train100.train)
    decisions = {
        "Retry": lambda crash: daifu.Retry(),
        "Action": lambda crash: daifu.Action("clip = 2.0"),
        # A one-line fix (its tree spliced into the old one, its scope the old one's), one that adds a
        # line (parsed whole, its scope the old one's), one that binds a new local (spliced, its scope
        # the old one's and the new local).
        "Surgery": lambda crash: daifu.Surgery(source.replace("            fault(step)\n", "            pass\n")),
        "Surgery +line": lambda crash: daifu.Surgery(
            source.replace("            fault(step)\n", "            pass\n            pass\n")),
        "Surgery +local": lambda crash: daifu.Surgery(
            source.replace("            fault(step)\n", "            skipped = step\n")),
    }
    results: dict[str, list[float]] = {}
    for name, policy in decisions.items():
        daifu.set_policy(policy)
        for temperature in ("cold", "warm"):
            durations = []
            shared = daifu.transform(fresh(train100.train))
            for _ in range(runs):
                fn = shared if temperature == "warm" else daifu.transform(fresh(train100.train))
                model, optimizer, data = train100.build()
                if name == "Surgery" and temperature == "cold":
                    timed_switches(fn, switches)
                fn(model, optimizer, data, 1, FaultAt(crash_step % 16))
                durations.append(RUN.history[-1]["duration_ms"])
            if name.startswith("Surgery") and temperature == "warm":
                continue  # a surgery installs a new version: every surgery is a first
            results[f"{name} ({temperature})"] = durations
    daifu.set_policy(None)
    return results


def long_source(groups: int = 90) -> str:
    """A generated function of about 1,000 lines: a loop over steps whose body is `groups` blocks
    (an `if`, a `with`, a `try`) of plain arithmetic; the fault comes in the last block."""
    lines = ["def long(steps, fault, manager):", "    total = 0", "    for step in range(steps):"]
    for g in range(groups):
        lines += [
            f"        if step >= {g % 3}:",
            f"            a{g} = step + {g}",
            f"            b{g} = a{g} * 2",
            "            with manager:",
            f"                c{g} = b{g} - a{g}",
            f"                total += c{g}",
            "            try:",
            f"                d{g} = total % {g + 7}",
            "            except ZeroDivisionError:",
            f"                d{g} = 0",
            f"            total += d{g}" if g < groups - 1 else "            fault(step)",
        ]
    return "\n".join(lines + ["    return total", ""])


def long_function(runs: int) -> None:
    """Vaccinating the ~1,000-line function (CPU time), and restore times at a first and a repeated crash."""
    source = long_source()
    namespace: dict = {}
    exec(compile(source, "<long>", "exec"), namespace)
    import linecache

    linecache.cache["<long>"] = (len(source), None, source.splitlines(True), "<long>")
    daifu.set_policy(lambda crash: daifu.Retry())
    cold, warm = [], []
    shared = daifu.transform(fresh(namespace["long"]))
    for _ in range(runs):
        fn = daifu.transform(fresh(namespace["long"]))
        fn(3, FaultAt(2), contextlib.nullcontext())
        cold.append(RUN.history[-1]["duration_ms"])
        shared(3, FaultAt(2), contextlib.nullcontext())
        warm.append(RUN.history[-1]["duration_ms"])
    daifu.set_policy(None)
    vaccination = vaccination_time(namespace["long"], 5)
    print(f"{len(source.splitlines())}-line function: vaccinating {vaccination:.1f} ms CPU; "
          f"restore (Retry) at a first crash {statistics.median(cold):.3f} ms, repeated {statistics.median(warm):.3f} ms "
          "(medians)")


def vaccination_time(fn: types.FunctionType, runs: int) -> float:
    """Median CPU milliseconds `daifu.transform` takes on a fresh copy of `fn` (it compiles the fast
    path and the continuation that resumes anywhere)."""
    times = []
    for _ in range(runs):
        started = time.thread_time()
        daifu.transform(fresh(fn))
        times.append((time.thread_time() - started) * 1e3)
    return statistics.median(times)


def first_crash_memory(functions: int = 5) -> None:
    """Memory a first crash leaves behind (tracemalloc, after a full collection): the vaccinated
    function's record of the repair and whatever the runtime keeps for the site."""
    import gc
    import tracemalloc

    daifu.set_policy(lambda crash: daifu.Retry())
    model, optimizer, data = train100.build()
    fns = [daifu.transform(fresh(train100.train)) for _ in range(functions)]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for fn in fns:
        fn(model, optimizer, data, 1, FaultAt(3))
    gc.collect()
    kept = (tracemalloc.get_traced_memory()[0] - before) / functions
    tracemalloc.stop()
    daifu.set_policy(None)
    print(f"memory kept per first crash (Retry, 100-line function): {kept / 1024:.1f} KiB; "
          f"vaccinating that function: {vaccination_time(train100.train, 11):.1f} ms CPU")


def checkpoint_retry(crash_step: int, every: int, runs: int) -> list[float]:
    """Seconds to recover by restarting: new process, import, rebuild, load, redo the lost steps."""
    folder = Path(tempfile.mkdtemp())
    model, optimizer, data = train100.build()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, folder / "last.pt")
    lost = crash_step % every
    script = (
        "import sys, torch\n"
        f"sys.path.insert(0, {str(HERE)!r})\n"
        "from train100 import build, train\n"
        "model, optimizer, data = build()\n"
        f"state = torch.load({str(folder / 'last.pt')!r})\n"
        "model.load_state_dict(state['model']); optimizer.load_state_dict(state['optimizer'])\n"
        f"train(model, optimizer, (data * 8)[:{lost}], 1, lambda step: None)\n"
    )
    durations = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", script], check=True)
        durations.append(time.perf_counter() - started)
    return durations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (CI)")
    parser.add_argument("--restore-only", action="store_true", help="only the restore times (`bench_all.py`)")
    parser.add_argument("--json", type=Path, help="also write the restore medians to this file (`bench_all.py`)")
    options = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    repeats = 5 if options.quick else 21
    print(f"Python {sys.version.split()[0]}, torch {torch.__version__}, {os.cpu_count()} CPUs\n")
    if not options.restore_only:
        training_overhead(repeats)
        tight_loop(repeats)
        one_line_calls(repeats)
        with_statement(repeats)
    crash_step, every = 175, 50
    switches: list[float] = []
    restore = restore_times(5 if options.quick else 20, crash_step, switches)
    print("\nrestore time, exception to resume (ms), 100-line training function:")
    for name, values in restore.items():
        print(f"  {name:<22} median {statistics.median(values):7.3f}   min {min(values):7.3f}   max {max(values):7.3f}")
    print(f"  then, as the interrupted iteration ends, the surgery's switch compiles the rest of the call and "
          f"the fast path: median {statistics.median(switches):.3f} ms CPU ({len(switches)} switches)")
    if options.json is not None:
        options.json.write_text(json.dumps({name: statistics.median(values) for name, values in restore.items()}))
    if options.restore_only:
        return
    first_crash_memory()
    long_function(5 if options.quick else 15)
    baseline = checkpoint_retry(crash_step, every, 2 if options.quick else 5)
    base = statistics.median(baseline)
    print(f"\ncheckpoint-retry (restart, import, rebuild, load, redo {crash_step % every} steps): median {base:.2f} s")
    for name, values in restore.items():
        print(f"  in situ {name:<22} is {base * 1e3 / statistics.median(values):,.0f}x faster")


if __name__ == "__main__":
    main()
