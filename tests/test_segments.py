"""A surgery's run resumes before its new version is compiled whole.

Inside a loop it resumes in a segment: the rest of the interrupted iteration only, then a switch.
The function's next call finds a stub until the new fast path is compiled (at the first switch, or
by the stub itself).

Each program crashes once inside a loop; a surgery removes the crash (`boom()` becomes `pass`),
so the run must end exactly as the fixed program's would: the rest of the iteration runs in the
segment, and every way of leaving it (falling off, `break`, `continue`, an exception handled
around the loop, a `return` through a `finally`, a `with` that swallows an exception, another
crash) reaches the code the segment left out (`Rewriter.segment`, `Vaccine.switch`).
"""

from __future__ import annotations

import inspect
import linecache
import threading
import textwrap
from typing import Any

import pytest

import daifu


class Boom(Exception):
    pass


def boom() -> None:
    raise Boom("the statement the surgery removes")


def fixed_source(function: Any) -> str:
    return inspect.getsource(inspect.unwrap(function)).replace("boom()", "pass")


def surgery(function: Any) -> Any:
    source = fixed_source(function)
    return lambda crash: daifu.Surgery(source)


def test_the_rest_of_the_iteration_runs_in_a_segment_and_later_ones_run_the_new_code(decide) -> None:
    seen: list[tuple[int, int]] = []

    def compiled() -> tuple[int, int]:
        vaccine = train.__daifu__
        return (len([c for v in vaccine.versions for c in v.segments.values() if c is not None]),
                sum(len(v.continuations) for v in vaccine.versions))

    @daifu.transform
    def train(steps):
        log = []
        for step in range(steps):
            if step == 2:
                boom()
            log.append(step)
            if step == 2:
                seen.append(compiled())
        log.append("done")
        return log

    decide(surgery(train))
    assert train(5) == [0, 1, 2, 3, 4, "done"]
    assert seen == [(1, 0)]  # the restore compiled the segment alone
    assert sum(len(v.continuations) for v in train.__daifu__.versions) == 1  # the remaining iterations, compiled at the switch
    assert train(3) == [0, 1, 2, "done"]  # the next call runs the new version's fast path


def test_break_in_the_rest_of_the_iteration_skips_the_else_and_runs_what_follows(decide) -> None:
    @daifu.transform
    def f():
        log = []
        for i in range(5):
            if i == 1: boom()
            if i == 1:
                log.append("break")
                break
            log.append(i)
        else:
            log.append("else")
        log.append("after")
        return log

    decide(surgery(f))
    assert f() == [0, "break", "after"]


def test_continue_in_the_rest_of_the_iteration_goes_on_with_the_next_item(decide) -> None:
    @daifu.transform
    def f():
        log = []
        for i in range(4):
            if i == 1: boom()
            if i == 1:
                continue
            log.append(i)
        else:
            log.append("else")
        return log

    decide(surgery(f))
    assert f() == [0, 2, 3, "else"]


def test_an_exception_handled_around_the_loop_runs_the_handler_and_what_follows_it(decide) -> None:
    @daifu.transform
    def f():
        log = []
        try:
            for i in range(5):
                if i == 2: boom()
                if i == 2:
                    raise KeyError("stop")
                log.append(i)
            log.append("loop done")
        except KeyError:
            log.append("handled")
        log.append("after")
        return log

    decide(surgery(f))
    assert f() == [0, 1, "handled", "after"]


def test_a_handler_inside_an_outer_loop_that_breaks_or_continues_it(decide) -> None:
    @daifu.transform
    def f():
        log = []
        for outer in range(4):
            try:
                for inner in range(3):
                    if (outer, inner) == (1, 1): boom()
                    if inner == 1 and outer in (1, 2):
                        raise ValueError(outer)
                    log.append((outer, inner))
            except ValueError as error:
                if error.args[0] == 1:
                    log.append("continue")
                    continue
                log.append("break")
                break
            log.append(f"outer {outer} done")
        return log

    decide(surgery(f))
    assert f() == [(0, 0), (0, 1), (0, 2), "outer 0 done", (1, 0), "continue", (2, 0), "break"]


def test_a_return_in_the_rest_of_the_iteration_runs_the_enclosing_finally_once(decide) -> None:
    log: list[Any] = []

    @daifu.transform
    def f():
        try:
            for i in range(5):
                if i == 1: boom()
                if i == 2:
                    return f"returned at {i}"
                log.append(i)
        finally:
            log.append("finally")
        return "fell off"

    decide(surgery(f))
    assert f() == "returned at 2"
    assert log == [0, 1, "finally"]


class Swallow:
    def __init__(self, log: list[Any]) -> None:
        self.log = log

    def __enter__(self) -> Swallow:
        self.log.append("enter")
        return self

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> bool:
        self.log.append(("exit", kind.__name__ if kind else None))
        return kind is KeyError


@pytest.mark.parametrize("stop", [True, False])
def test_a_with_around_the_loop_is_exited_once_whether_it_swallows_an_exception_or_not(decide, stop) -> None:
    log: list[Any] = []

    @daifu.transform
    def f(stop):
        with Swallow(log):
            for i in range(4):
                if i == 1: boom()
                if stop and i == 2:
                    raise KeyError(i)
                log.append(i)
        log.append("after")
        return log

    decide(surgery(f))
    expected = ["enter", 0, 1, ("exit", "KeyError"), "after"] if stop else ["enter", 0, 1, 2, 3, ("exit", None), "after"]
    assert f(stop) == expected


def test_another_crash_in_the_segment_is_repaired_and_the_run_goes_on(decide) -> None:
    flaky = {"left": 1}

    def once() -> None:
        if flaky["left"]:
            flaky["left"] -= 1
            raise ConnectionError("flaky")

    @daifu.transform
    def f():
        log = []
        for i in range(4):
            if i == 1: boom()
            if i == 1:
                once()
            log.append(i)
        return log

    seen = decide(surgery(f), daifu.Retry())
    assert f() == [0, 1, 2, 3]
    assert [type(c.exception) for c in seen] == [Boom, ConnectionError]


def test_a_while_loop_tests_its_condition_again_after_the_segment(decide) -> None:
    @daifu.transform
    def f():
        log, n = [], 0
        while n < 4:
            n += 1
            if n == 2: boom()
            log.append(n)
        else:
            log.append("else")
        return log

    decide(surgery(f))
    assert f() == [1, 2, 3, 4, "else"]


def test_nested_loops_switch_to_the_next_inner_item_then_the_outer_loop(decide) -> None:
    @daifu.transform
    def f():
        log = []
        for a in range(3):
            for b in range(3):
                if (a, b) == (1, 0): boom()
                log.append((a, b))
            log.append(f"row {a}")
        return log

    decide(surgery(f))
    assert f() == [(a, b) for b in range(3) for a in [0]] + ["row 0"] + [(1, b) for b in range(3)] + ["row 1"] + [
        (2, b) for b in range(3)
    ] + ["row 2"]


def test_a_closure_and_zero_argument_super_work_after_the_switch(decide) -> None:
    class Base:
        def scale(self) -> int:
            return 10

    class Model(Base):
        @daifu.transform
        def run(self, items):
            total = 0
            read = lambda: total  # noqa: E731 - a closure over `total`, rebound in the loop
            seen = []
            for item in items:
                if item == 1: boom()
                total += item * super().scale()
                seen.append(read())
            return seen

    decide(surgery(Model.run))
    assert Model().run([0, 1, 2, 3]) == [0, 10, 30, 60]


def test_a_call_during_the_resumed_run_and_calls_after_it_reach_the_new_code_with_every_kind_of_parameter(
    decide,
) -> None:
    offset = 100

    @daifu.transform
    def f(a, /, b, c=3, *args, d, e=5, **kw):
        if a < 0:
            return ("inner", a, b, c, args, d, e, kw, offset)
        total = a + b + c + sum(args) + d + e + sum(kw.values())
        half = total / (total - total)
        return total, half, f(-1, 2, d=4)

    signature = inspect.signature(f)
    decide(daifu.Surgery(inspect.getsource(f).replace("total / (total - total)", "total // 2")))
    assert f(1, 2, 4, 5, d=6, z=7) == (30, 15, ("inner", -1, 2, 3, (), 4, 5, {}, offset))
    assert inspect.signature(f) == signature
    assert f(-1, 2, 4, 5, 6, d=7, e=8, z=9) == ("inner", -1, 2, 4, (5, 6), 7, 8, {"z": 9}, offset)
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'd'"):
        f(1, 2)


def test_the_first_calls_after_a_surgery_from_several_threads_at_once_all_run_the_new_code(decide) -> None:
    @daifu.transform
    def g(x):
        return x / 0

    decide(daifu.Surgery(inspect.getsource(g).replace("x / 0", "-x")))
    assert g(1) == -1
    assert g.__code__ is g.__daifu__._stub  # no loop, no switch: the next call compiles the new code
    assert g.__code__.co_filename.endswith("(surgery 1)")  # the first version's stub, in the new file
    results: list[object] = []
    threads = [threading.Thread(target=lambda n=n: results.append(g(n))) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [-3, -2, -1, 0]
    assert g.__daifu__._stub is None and g.__code__.co_filename.endswith("(surgery 1)")


def test_the_switch_compiles_the_new_fast_path_so_the_next_call_runs_it_directly(decide) -> None:
    @daifu.transform
    def f(n):
        out = []
        for i in range(n):
            if i == 1: boom()
            out.append(i)
        return out

    decide(surgery(f))
    assert f(3) == [0, 1, 2]
    assert f.__daifu__._stub is None and f.__code__.co_filename.endswith("(surgery 1)")


def nested(depth: int) -> str:
    """A function whose crash sits inside `depth` nested `try ... finally` statements in a loop."""
    body = "for i in range(3):\n    if i == 1: boom()\n    log.append(i)"
    for level in range(depth - 1):
        body = f"try:\n{textwrap.indent(body, '    ')}\nfinally:\n    log.append('finally {level}')"
    return f"def deep(log):\n{textwrap.indent(body, '    ')}\n    return log\n"


@pytest.mark.parametrize("depth", [4, 5])
def test_a_version_nested_too_deep_to_defer_is_compiled_whole_before_the_run_resumes(decide, depth) -> None:
    filename = f"<deep {depth}>"
    linecache.cache[filename] = (len(nested(depth)), None, nested(depth).splitlines(True), filename)
    namespace: dict[str, Any] = {"boom": boom}
    exec(compile(nested(depth), filename, "exec"), namespace)
    deep = daifu.transform(namespace["deep"])
    decide(daifu.Surgery(nested(depth).replace("boom()", "pass")))
    assert deep([]) == [0, 1, 2] + [f"finally {level}" for level in range(depth - 1)]
    vaccine = deep.__daifu__
    assert vaccine.versions[-1].deferrable == (depth <= 4)
    segments = [code for v in vaccine.versions for code in v.segments.values() if code is not None]
    assert len(segments) == (1 if depth <= 4 else 0)
    assert vaccine._stub is None  # compiled by the switch, or before the resume
