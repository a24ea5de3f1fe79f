"""The guarantees of a resume on code that nests scopes, decorates, and finishes in `finally`.

One test (or a few) per defect the resume-semantics issue reported, through the public API.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import linecache
import sys
import traceback
import warnings
from typing import Any

import pytest

import daifu


def skip_index_errors(crash: daifu.Crash) -> Any:
    return daifu.Skip() if isinstance(crash.exception, IndexError) else daifu.Raise()


# -- 1. locals captured by nested scopes and rebound after the resume point --------------------------


def test_a_local_read_by_a_comprehension_and_rebound_later_survives_every_decision(decide) -> None:
    @daifu.transform()
    def train(batches):
        history = []
        for step, batch in enumerate(batches):
            scale = 0.5
            check = batch[2]  # noqa: F841 - IndexError on the short batch
            history.append([scale * v for v in batch])
        return history

    daifu.set_policy(skip_index_errors)
    assert train([[1, 2, 3], [4, 5], [6, 7, 8]]) == [[0.5, 1.0, 1.5], [2.0, 2.5], [3.0, 3.5, 4.0]]


def test_an_action_then_a_generator_expression_over_a_rebound_cell(decide) -> None:
    @daifu.transform()
    def weigh(xs, w):
        for _ in range(2):
            n = len(xs) / 2
            log = xs[:n]  # noqa: F841 - TypeError: a float index
            w = w + sum(w * x for x in xs)
        return w

    seen = decide(lambda crash: daifu.Action("n = int(n)"), lambda crash: daifu.Action("n = int(n)"))
    assert weigh([1, 2], 1.0) == 16.0 and len(seen) == 2


def test_a_closure_defined_in_the_loop_sees_this_iterations_values_after_a_retry(decide) -> None:
    fails = {1}

    def flaky(i: int) -> int:
        if i in fails:
            fails.discard(i)
            raise RuntimeError("once")
        return i

    @daifu.transform
    def fit(data):
        results = []
        for x, y in data:
            def closure():
                return x * 10 + y

            flaky(x)
            results.append(closure())
        return results

    decide(daifu.Retry())
    assert fit([(0, 1), (1, 2), (2, 3)]) == [1, 12, 23]


# -- 2. decorators below `@daifu.transform` ------------------------------------------------------------


def doubling(fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(x: int) -> int:
        return fn(x * 2)

    return wrapper


def test_a_wraps_wrapper_below_keeps_working() -> None:
    @daifu.transform
    @doubling
    def g(x):
        return x * 2

    assert g(1) == 4 and g.__daifu__ is None if hasattr(g, "__daifu__") else g(1) == 4
    assert inspect.unwrap(g).__daifu__ is not None  # the function itself was vaccinated, in place


def test_a_wraps_wrapper_below_still_wraps_a_repaired_call(decide) -> None:
    decide(lambda crash: daifu.Action("x = 3"))

    @daifu.transform
    @doubling
    def g(x):
        return 12 // (x - 2)

    assert g(1) == 12  # the wrapper doubled 1 to 2; the action set x = 3 and the call resumed


def test_a_context_decorator_below_still_wraps_every_call() -> None:
    entered = []

    class watched(contextlib.ContextDecorator):
        def __enter__(self) -> Any:
            entered.append("enter")
            return self

        def __exit__(self, *exc: Any) -> bool:
            entered.append("exit")
            return False

    @daifu.transform
    @watched()
    def f(x):
        return x + 1

    assert f(1) == 2 and entered == ["enter", "exit"]


def test_lru_cache_and_method_decorators_keep_their_meaning() -> None:
    calls = []

    @daifu.transform
    @functools.lru_cache(maxsize=None)
    def square(x):
        calls.append(x)
        return x * x

    assert square(3) == 9 and square(3) == 9 and calls == [3]

    class Model:
        @daifu.transform
        @staticmethod
        def build():
            return 1

        @daifu.transform
        @classmethod
        def make(cls):
            return cls.__name__

        @daifu.transform
        @property
        def size(self):
            return 5

    assert Model.build() == 1 and Model.make() == "Model" and Model().size == 5


def test_a_wrapper_that_does_not_say_what_it_wraps_is_seen_through_with_a_warning(decide) -> None:
    def hiding(fn: Any) -> Any:
        def wrapper(x: int) -> int:
            return fn(x) + 100

        return wrapper

    with pytest.warns(RuntimeWarning, match=r"wrapper.*around.*'.*f'.*functools.wraps"):

        @daifu.transform
        @hiding
        def f(x):
            return 10 // x

    decide(lambda crash: daifu.Action("x = 5"))
    assert f(0) == 102  # the user's function was vaccinated and repaired; the wrapper still adds 100


@pytest.mark.torch
def test_torch_no_grad_below_keeps_gradients_off_and_needs_no_global() -> None:
    torch = pytest.importorskip("torch")
    weight = torch.ones(2, requires_grad=True)

    @daifu.transform
    @torch.no_grad()
    def predict(x):
        return (weight * x).sum()

    out = predict(torch.ones(2))
    assert out.item() == 2.0 and not out.requires_grad


# -- 3. a resume inside a running `finally` -----------------------------------------------------------


class Once:
    """Raises once, then returns its argument."""

    def __init__(self) -> None:
        self.raised = False

    def __call__(self, value: Any) -> Any:
        if not self.raised:
            self.raised = True
            raise RuntimeError("flaky")
        return value


def test_a_finally_resumed_after_a_return_still_returns(decide) -> None:
    once, log = Once(), []
    decide(daifu.Retry())

    @daifu.transform
    def f():
        try:
            log.append("body")
            return "value"
        finally:
            log.append(once("cleanup"))

    assert f() == "value" and log == ["body", "cleanup"]


def test_a_finally_resumed_during_an_exception_still_raises_it(decide) -> None:
    once, log = Once(), []
    seen = decide(daifu.Raise(), daifu.Skip())

    @daifu.transform
    def f():
        try:
            raise KeyError("original")
        finally:
            log.append("finally")
            once(None)
            log.append("after")

    with pytest.raises(KeyError, match="original"):
        f()
    assert log == ["finally", "after"] and [type(c.exception) for c in seen] == [KeyError, RuntimeError]


def test_break_and_continue_pending_in_a_finally_keep_their_meaning(decide) -> None:
    decide(daifu.Retry(), daifu.Retry())
    first, second, log = Once(), Once(), []

    @daifu.transform
    def f():
        for i in range(5):
            try:
                if i == 1:
                    continue
                if i == 3:
                    break
                log.append(i)
            finally:
                if i == 1:
                    first(None)
                if i == 3:
                    second(None)
                log.append(f"finally {i}")
        else:
            log.append("else")
        return log

    assert f() == [0, "finally 0", "finally 1", 2, "finally 2", "finally 3"]


def test_surgery_and_action_inside_a_finally(decide) -> None:
    zero = [0]

    @daifu.transform
    def f():
        total = 0
        for i in range(3):
            try:
                total += i
            finally:
                total += 10 // zero[0]
        return total

    fixed = inspect.getsource(f).replace("10 // zero[0]", "10")
    decide(daifu.Surgery(fixed))
    assert f() == 33


# -- 4. one validator ------------------------------------------------------------------------------------


def test_a_surgery_changing_the_enclosing_for_header_is_refused_by_every_checker(decide) -> None:
    @daifu.transform
    def f(items):
        out = []
        for item in items:
            out.append(10 // item)
        return out

    changed = inspect.getsource(f).replace("for item in items:", "for item in items[1:]:")
    reasons = []
    decide(lambda crash: reasons.append(crash.check(daifu.Surgery(changed))) or daifu.Surgery(changed), daifu.Skip())
    assert f([1, 0, 2]) == [10, 5]
    assert reasons and "enclosing `for` statement" in reasons[0]


def test_a_surgery_adding_yield_is_refused_with_the_reason(decide) -> None:
    @daifu.transform
    def f():
        return 1 // 0

    seen = decide(lambda crash: daifu.Surgery("def f():\n    yield 1\n"), daifu.Raise())
    with pytest.raises(ZeroDivisionError):
        f()
    assert "generator" in seen[1].tried[0][1]


def test_a_surgery_that_stops_assigning_a_name_it_still_reads_is_refused(decide) -> None:
    @daifu.transform
    def f(x):
        y = x * 2
        z = y / (x - 1)
        return z + y

    stale = inspect.getsource(f).replace("        y = x * 2\n", "")
    seen = decide(lambda crash: daifu.Surgery(stale), daifu.Raise())
    with pytest.raises(ZeroDivisionError):
        f(1)
    assert "'y'" in seen[1].tried[0][1] and "nothing defines" in seen[1].tried[0][1]


# -- 5. what the user sees after a resume -----------------------------------------------------------------


def test_after_a_surgery_a_traceback_shows_the_code_that_ran(decide) -> None:
    @daifu.transform
    def f(x):
        y = x + 1
        return 10 // (y - 2)

    patched = inspect.getsource(f).replace("return 10 // (y - 2)", "return 100 // (y - 2)  # patched")
    decide(daifu.Surgery(patched), daifu.Raise())
    with pytest.raises(ZeroDivisionError) as info:
        f(1)
    text = "".join(traceback.format_exception(info.value))
    assert "return 100 // (y - 2)  # patched" in text
    assert inspect.getsource(f).count("# patched") == 1  # inspect reads the running source too


def test_after_a_resume_an_escaping_exception_shows_the_frames_it_would_without_daifu(decide) -> None:
    """The frame that runs the continuation of a repaired call leaves itself out of the traceback (Python
    3.11 on); on 3.10 it stays, at the `def` line, never at a line that did not run."""
    once = Once()

    @daifu.transform
    def f():
        once(None)
        return 1 // 0

    def caller():
        return f()

    decide(daifu.Retry(), daifu.Raise())
    with pytest.raises(ZeroDivisionError) as info:
        caller()
    entries = traceback.extract_tb(info.value.__traceback__)
    frames = [entry for entry in entries if entry.name == "f"]
    expected = ["return 1 // 0"] if sys.version_info >= (3, 11) else ["def f():", "return 1 // 0"]
    assert [entry.line for entry in frames] == expected
    assert frames[0].lineno == inspect.getsourcelines(f)[1] + (3 if sys.version_info >= (3, 11) else 1)  # decorator line first
    assert [entry.name for entry in entries[1:]] == ["caller", *["f"] * len(expected)]
    assert not any("daifu" in entry.filename for entry in entries[1:])


def test_after_a_surgery_a_later_call_that_raises_shows_no_stub_frame(decide) -> None:
    """Calls after a surgery run a stub until the new code is compiled: it is left out of tracebacks."""

    @daifu.transform
    def f(x):
        return 10 // x

    patched = inspect.getsource(f).replace("return 10 // x", "return 10 // (x - 1)")
    decide(daifu.Surgery(patched), daifu.Raise())
    assert f(0) == -10
    with pytest.raises(ZeroDivisionError) as info:
        f(1)
    names = [entry.name for entry in traceback.extract_tb(info.value.__traceback__)]
    assert names.count("f") == (1 if sys.version_info >= (3, 11) else 2)
    assert traceback.extract_tb(info.value.__traceback__)[-1].line == "return 10 // (x - 1)"


def test_a_patched_callee_is_compiled_with_its_own_name_and_shows_its_new_code(decide) -> None:
    from tests import patchtarget

    decide(daifu.Patch(f"{patchtarget.__name__}:halve", "def halve(x):\n    return x // 2\n"))

    @daifu.transform
    def f():
        return list(range(patchtarget.halve(5)))  # TypeError: a float

    try:
        assert f() == [0, 1]
        code = patchtarget.halve.__code__
        assert code.co_name == "halve" and "(patch" in code.co_filename
        assert linecache.getline(code.co_filename, code.co_firstlineno + 1).strip() == "return x // 2"
    finally:
        patchtarget.restore()


def test_no_warning_is_emitted_when_nothing_crashes() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        @daifu.transform
        def f(x):
            return [x + k for k in range(3)]

        assert f(1) == [1, 2, 3]


def test_the_recorded_restore_time_is_the_time_from_the_raise_to_the_resumed_statement(decide) -> None:
    """`duration_ms` against an outside clock: the program's own timestamps around the repair.

    Never more than the outside time; at least half of it in one of five repairs (a busy machine may
    pause the program between the raise and the crash handler, or after the record line, in any one)."""
    import time

    from daifu.state import RUN

    def repaired() -> tuple[float, float]:
        """(the recorded restore time, the program's own) of one repair, in ms."""
        stamps: dict[str, float] = {}

        def fail_once() -> None:
            if "raised" not in stamps:
                stamps["raised"] = time.perf_counter()
                raise RuntimeError("once")

        @daifu.transform
        def f():
            fail_once()
            stamps["resumed"] = time.perf_counter()

        f()
        return RUN.history[-1]["duration_ms"], (stamps["resumed"] - stamps["raised"]) * 1000

    decide(*[daifu.Retry()] * 5)
    measured = [repaired() for _ in range(5)]
    assert all(0 < recorded_ms <= outside_ms for recorded_ms, outside_ms in measured), measured
    assert any(recorded_ms >= 0.5 * outside_ms for recorded_ms, outside_ms in measured), measured
