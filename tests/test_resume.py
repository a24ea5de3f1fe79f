"""A crash inside a vaccinated function: intercepted in place, repaired, resumed in situ."""

from __future__ import annotations

import inspect
import sys
import traceback

import pytest

import daifu
from tests.copies import fresh


class Flaky:
    """A callable that raises on the calls listed in `fail_on` (1-based), and logs every call."""

    def __init__(self, fail_on, error=RuntimeError):
        self.fail_on, self.error, self.calls = set(fail_on), error, 0

    def __call__(self, value=None):
        self.calls += 1
        if self.calls in self.fail_on:
            raise self.error(f"call {self.calls} failed")
        return value


class Tracked:
    """A context manager that logs its enter and exit."""

    def __init__(self, log, name="cm"):
        self.log, self.name = log, name

    def __enter__(self):
        self.log.append(f"enter {self.name}")
        return self

    def __exit__(self, kind, value, tb):
        self.log.append(f"exit {self.name} {kind.__name__ if kind else None}")
        return False


def source_of(fn, old, new):
    return inspect.getsource(fn).replace(old, new)


def test_retry_resumes_at_the_faulty_statement_with_live_state(decide):
    seen = decide(daifu.Retry())
    flaky = Flaky({3})
    log = []

    @daifu.transform
    def train():
        state = {"steps": 0}
        for epoch in range(2):
            for batch in range(3):
                log.append(("before", epoch, batch))
                value = flaky(batch)
                log.append(("after", epoch, batch, value))
                state["steps"] += 1
        return state

    assert train() == {"steps": 6}
    assert log.count(("before", 0, 2)) == 1  # the statements before the faulty one did not run again
    assert [entry for entry in log if entry[0] == "after"] == [("after", e, b, b) for e in range(2) for b in range(3)]
    crash = seen[0]
    assert crash.statement == "value = flaky(batch)" and crash.kind == "statement"
    assert crash.locals["epoch"] == 0 and crash.locals["batch"] == 2 and crash.attempt == 1
    assert crash.lineno == inspect.getsourcelines(train)[1] + 6
    assert crash.filename == __file__
    assert "RuntimeError: call 3 failed" in crash.traceback_text


def test_skip_goes_on_after_the_statement(decide):
    decide(daifu.Skip())

    @daifu.transform
    def f():
        out = []
        for i in range(4):
            out.append(10 // (i - 2))
            out.append(i)
        return out

    assert f() == [-5, 0, -10, 1, 2, 10, 3]


def test_action_rebinds_locals_and_globals_then_retries(decide):
    seen = decide(daifu.Action("scale = 2\nOFFSET_FROM_ACTION = 100"))

    @daifu.transform
    def f():
        scale = 0
        values = []
        for i in range(3):
            values.append(10 // scale + i)
        return values, OFFSET_FROM_ACTION  # noqa: F821

    assert f() == ([5, 6, 7], 100)
    assert seen[0].locals["i"] == 0
    del globals()["OFFSET_FROM_ACTION"]


LEARNING_RATE = 20.0


def test_action_reads_and_rebinds_a_module_global_the_function_reads(decide):
    """`lr = lr / 2` on a module global: the action reads its value first, as the function would, and
    rebinds it in the module (it raised UnboundLocalError: an assigned name was the action's local)."""
    decide(daifu.Action("LEARNING_RATE = LEARNING_RATE / 2"), daifu.Action("LEARNING_RATE *= 0.5"))
    calls = Flaky(fail_on=[2, 4])

    @daifu.transform
    def f():
        used = []
        for i in range(3):
            calls()
            used.append(LEARNING_RATE)
        return used

    try:
        assert f() == [20.0, 10.0, 5.0]
        assert LEARNING_RATE == 5.0
    finally:
        globals()["LEARNING_RATE"] = 20.0


def test_an_action_that_raises_puts_back_the_module_globals_it_rebound(decide, capfd):
    seen = decide(daifu.Action("LEARNING_RATE = LEARNING_RATE / 2\nraise RuntimeError('oops')"), daifu.Action("pass"))

    flaky = Flaky(fail_on=[1])

    @daifu.transform
    def f():
        flaky()
        return LEARNING_RATE

    assert f() == 20.0 and LEARNING_RATE == 20.0
    assert seen[1].tried[0][1] == "refused: the action raised RuntimeError: oops"
    told = capfd.readouterr().err
    assert "from policy refused: the action raised RuntimeError: oops" in told  # the terminal says why


def test_action_can_replace_an_undecorated_callee(decide):
    def broken(x):
        raise ValueError("bug in callee")

    holder = {"fn": broken}
    decide(daifu.Action("helper = lambda x: x * 3"))

    @daifu.transform
    def f():
        helper = holder["fn"]
        results = []
        for i in range(3):
            results.append(helper(i))
        return results

    assert f() == [0, 3, 6]


def test_surgery_resumes_in_the_same_iteration_and_patches_later_calls(decide):
    log = []

    @daifu.transform
    def train(batches):
        total = 0
        for epoch in range(2):
            for x in batches:
                log.append(("load", epoch, x))
                total += x / zero_value  # noqa: F821
        return total

    fixed = source_of(train, "x / zero_value", "x * 2")
    seen = decide(daifu.Surgery(fixed))
    globals()["zero_value"] = 0
    assert train([1, 2]) == 12
    assert log == [("load", e, x) for e in range(2) for x in (1, 2)]
    assert seen[0].locals["x"] == 1 and seen[0].locals["epoch"] == 0
    log.clear()
    assert train([5]) == 20  # the next call runs the new code: no crash, no policy needed
    assert len(seen) == 1
    del globals()["zero_value"]


def test_surgery_binding_a_name_the_crash_missed_resumes_without_compiling_the_function(decide):
    log = []

    @daifu.transform
    def train(batches):
        total = 0
        for x in batches:
            log.append(x)
            total += x * learning_rate  # noqa: F821
        return total

    fixed = source_of(train, "            total += x", "            learning_rate = 0.5\n            total += x")
    seen = decide(daifu.Surgery(fixed))
    assert train([2, 4]) == 3.0
    assert log == [2, 4] and len(seen) == 1  # the faulty statement ran again, nothing before it
    new = train.__daifu__.versions[-1]
    assert new.plain is None and "learning_rate" in new.scope.plain_locals  # its scope was derived
    assert train([6]) == 3.0  # the next call runs the new code


LOG_TO_SERVICE = False  # `service` is imported only when this is True


def test_surgery_is_applied_when_the_function_reads_an_undefined_name_on_a_branch_not_taken(decide):
    # A training script logging to a service only when asked (`wandb` in nanoGPT): the surgery
    # does not touch that name, and the plain program runs fine without it.
    @daifu.transform
    def train(n):
        total = 0.0
        for i in range(n):
            if LOG_TO_SERVICE:
                service.log({"i": i})  # noqa: F821
            total += 1 / (i - 2)
        return total

    seen = decide(lambda c: daifu.Surgery(c.source.replace("1 / (i - 2)", "1 / ((i - 2) or 1)")))
    assert train(5) == -0.5 - 1 + 1 + 1 + 0.5
    assert len(seen) == 1 and seen[0].tried == [(repr(daifu.Surgery(seen[0].source.replace(
        "1 / (i - 2)", "1 / ((i - 2) or 1)"))), "applied (policy)")]


def test_surgery_of_a_loop_body_after_its_iterator_raised_goes_on_with_the_next_item(decide):
    class Fetch:
        """An iterator over items 0 to 4 whose fetch of item 3 fails once (per `Loader`)."""

        def __init__(self, loader):
            self.loader, self.next = loader, 0

        def __iter__(self):
            return self

        def __next__(self):
            if self.next == 3 and not self.loader.failed:
                self.loader.failed = True
                raise OSError("transient fetch error")
            if self.next == 5:
                raise StopIteration
            self.next += 1
            return self.next - 1

    class Loader:
        """Like a DataLoader: each `iter()` starts a new pass over the items."""

        failed = False

        def __iter__(self):
            return Fetch(self)

    @daifu.transform
    def train(loader):
        seen = []
        for x in loader:
            seen.append(x)
        return seen

    seen = decide(daifu.Surgery(source_of(train, "seen.append(x)", "seen.append(x * 10)")))
    assert train(Loader()) == [0, 1, 2, 30, 40]  # no item twice: the loop was not started over
    assert seen[0].kind == "for"


def test_surgery_of_a_line_above_resumes_there(decide):
    ran = []

    @daifu.transform
    def f(data):
        out = []
        for x in data:
            ran.append("head")
            n = len(x)
            idx = slice(0, n / 2)
            out.append(x[idx])
        return out

    decide(daifu.Surgery(source_of(f, "n / 2", "n // 2")))
    assert f(["abcd", "xy"]) == ["ab", "x"]
    assert ran == ["head", "head"]


def test_with_exits_once_and_finally_runs_once(decide):
    log = []

    @daifu.transform
    def f():
        for i in range(2):
            try:
                with Tracked(log, "outer"):
                    with Tracked(log, "inner"):
                        log.append(10 // (i - 1))
                    log.append("after inner")
            finally:
                log.append("finally")
        return "done"

    fixed = source_of(f, "10 // (i - 1)", "10 // (i + 1)")
    for decision in (daifu.Action("i = 3"), daifu.Skip(), daifu.Surgery(fixed)):
        log.clear()
        decide(decision)
        assert f() == "done"
        assert log.count("enter outer") == log.count("exit outer None") == 2
        assert log.count("enter inner") == log.count("exit inner None") == 2
        assert log.count("finally") == 2
        assert log.count("after inner") == 2
        order = [log.index(event) for event in ("exit inner None", "after inner", "exit outer None", "finally")]
        assert order == sorted(order)


def test_withs_left_by_two_hand_overs_exit_once_each(decide):
    """The second crash happens inside the continuation of the first, inside the `with` it re-entered."""

    def f(log):
        d = e = 0
        with Tracked(log, "outer"):
            log.append(10 // d)
            with Tracked(log, "inner"):
                log.append(10 // e)
                return "done"

    for second, ending in ((daifu.Action("e = 2"), ["exit inner None", "exit outer None"]),
                           (daifu.Raise(), ["exit inner ZeroDivisionError", "exit outer ZeroDivisionError"])):
        log = []
        decide(daifu.Action("d = 1"), second)
        vaccinated = daifu.transform(fresh(f))
        if isinstance(second, daifu.Raise):
            with pytest.raises(ZeroDivisionError):
                vaccinated(log)
        else:
            assert vaccinated(log) == "done"
        middle = [5] if isinstance(second, daifu.Action) else []
        assert log == ["enter outer", 10, "enter inner", *middle, *ending]


def test_break_continue_return_in_the_patched_region(decide):
    @daifu.transform
    def f(stop):
        out = []
        for i in range(6):
            if i == 1:
                out.append(1 / 0)
            out.append(i)
        else:
            out.append("else")
        return out

    decide(daifu.Surgery(source_of(f, "out.append(1 / 0)", "continue")))
    assert f(0) == [0, 2, 3, 4, 5, "else"]

    @daifu.transform
    def g():
        out = []
        for i in range(6):
            if i == 1:
                out.append(1 / 0)
            out.append(i)
        else:
            out.append("else")
        return out

    decide(daifu.Surgery(source_of(g, "out.append(1 / 0)", "break")))
    assert g() == [0]

    @daifu.transform
    def h():
        out = []
        for i in range(6):
            with open(__file__):
                if i == 1:
                    out.append(1 / 0)
            out.append(i)
        return out

    decide(daifu.Surgery(source_of(h, "out.append(1 / 0)", "return out + ['returned']")))
    assert h() == [0, "returned"]


def test_header_crashes_for_next_item_if_while_and_with(decide):
    def batches():
        yield 1
        raise OSError("loader hiccup")

    class Loader:
        def __init__(self):
            self.failed = False

        def __iter__(self):
            return self

        def __next__(self):
            if not self.failed:
                self.failed = True
                raise OSError("transient fetch error")
            raise StopIteration

    seen = decide(daifu.Retry(), daifu.Skip())

    @daifu.transform
    def loop():
        got = []
        for b in Loader():
            got.append(b)
        else:
            got.append("exhausted-1")
        for b in batches():
            got.append(b)
        else:
            got.append("exhausted-2")
        return got

    assert loop() == ["exhausted-1", 1, "exhausted-2"]
    assert [c.kind for c in seen] == ["for", "for"]
    assert seen[0].statement == "for b in Loader():"

    toggle = Flaky({1}, ValueError)
    seen = decide(daifu.Retry(), daifu.Skip())

    @daifu.transform
    def tests():
        out = []
        if toggle(True):
            out.append("if-branch")
        if [][0]:
            out.append("never")
        else:
            out.append("never either")
        out.append("after")
        return out

    assert tests() == ["if-branch", "after"]
    assert [c.kind for c in seen] == ["if", "if"]

    seen = decide(daifu.Skip(), daifu.Retry())
    log = []
    opener = Flaky({1})

    @daifu.transform
    def whiles_and_withs():
        n = 0
        while n < 3 and [][n]:
            n += 1
        else:
            log.append("while-else")
        with Tracked(log) if opener(True) else None:
            log.append("body")
        return n

    assert whiles_and_withs() == 0
    assert log == ["while-else", "enter cm", "body", "exit cm None"]
    assert [c.kind for c in seen] == ["while", "with"]


def test_repeated_crash_counts_attempts_and_gives_up(decide):
    seen = decide(daifu.Retry(), daifu.Retry(), daifu.Retry(), daifu.Retry())

    @daifu.transform
    def f():
        x = 0
        return 1 / x

    with pytest.raises(ZeroDivisionError):
        f()
    assert [c.attempt for c in seen] == [1, 2, 3]  # the 4th crash raised without asking

    daifu.configure(max_attempts=1)
    seen = decide(daifu.Retry(), daifu.Retry())
    with pytest.raises(ZeroDivisionError):
        f()
    assert [c.attempt for c in seen] == [1]


def test_progress_resets_the_attempt_count(decide):
    flaky = Flaky({2, 4, 6, 8, 10})
    seen = decide(*[daifu.Retry()] * 10)

    @daifu.transform
    def f():
        out = []
        for i in range(8):
            out.append(flaky(i))
        return out

    assert f() == list(range(8))
    assert [c.attempt for c in seen] == [1] * 5


def test_bad_surgeries_are_refused_and_the_crash_offered_again(decide):
    @daifu.transform
    def f(a, b=1):
        total = 0
        for i in range(3):
            total += a / (i - 1)
        return total

    good = source_of(f, "a / (i - 1)", "a * i")
    bad = [
        source_of(f, "total += a / (i - 1)", "total += (a"),  # syntax error
        source_of(f, "def f(a, b=1)", "def g(a, b=1)"),  # renamed
        source_of(f, "def f(a, b=1)", "def f(a, c=1)"),  # parameters changed
        source_of(f, "total += a / (i - 1)", "nonlocal zz"),  # does not compile
        # Parse, keep the scope (a version derived from the crashed one, `daifu.core.changes`), but
        # do not compile: in the statement resumed (compiled with the code the run resumes in), and
        # before the loop (compiled on its own).
        source_of(f, "total += a / (i - 1)", "*total, *i = [a, i]"),
        source_of(f, "total = 0", "*total, *a = [a]"),
        source_of(f, "total = 0", "break"),
    ]
    seen = decide(*[daifu.Surgery(s) for s in bad], daifu.Surgery(good))
    daifu.configure(max_attempts=8)
    assert f(2) == -2.0 + 2 * 1 + 2 * 2
    reasons = [why for _kind, why in seen[-1].tried]
    assert "line" in reasons[0] and "does not compile" in reasons[0]
    assert "renames the function from 'f' to 'g'" in reasons[1]
    assert "changes the parameters" in reasons[2]
    assert all("does not compile" in reason for reason in reasons[3:7])
    assert "multiple starred" in reasons[4] and "multiple starred" in reasons[5] and "outside loop" in reasons[6]
    assert all(c.locals["i"] == 1 and c.locals["total"] == -2.0 for c in seen)
    assert len(f.__daifu__.versions) == 2


def test_action_that_raises_is_reported_and_state_untouched(decide):
    seen = decide(daifu.Action("divisor = 2\nraise RuntimeError('oops')"), daifu.Action("divisor = 4"))

    @daifu.transform
    def f():
        divisor = 0
        return 8 / divisor

    assert f() == 2.0
    assert seen[1].locals["divisor"] == 0
    first = daifu.Action("divisor = 2\nraise RuntimeError('oops')")
    assert seen[1].tried[0] == (repr(first), "refused: the action raised RuntimeError: oops")


def test_surgery_changing_enclosing_control_flow_is_refused(decide):
    @daifu.transform
    def f():
        out = []
        for i in range(3):
            out.append(1 / (i - 1))
        return out

    refused = source_of(f, "for i in range(3):", "for j in range(3):")
    seen = decide(daifu.Surgery(refused), daifu.Skip())
    assert f() == [-1.0, 1.0]
    assert "enclosing `for` statement" in seen[1].tried[0][1] and seen[1].tried[0][1].startswith("refused: ")


def test_policy_errors_and_internal_failures_surface_the_original_exception(decide):
    def bad_policy(crash):
        raise RuntimeError("policy bug")

    daifu.set_policy(bad_policy)

    @daifu.transform
    def f():
        return {}["key"]

    with pytest.warns(RuntimeWarning, match="policy raised"):
        with pytest.raises(KeyError) as info:
            f()
    assert info.value.args == ("key",)

    daifu.set_policy(lambda crash: "not a decision")
    with pytest.warns(RuntimeWarning, match="not a DaiFu decision"):
        with pytest.raises(KeyError):
            f()


def test_raise_propagates_once_through_vaccinated_callers(decide):
    seen = decide(daifu.Raise(), daifu.Retry())

    @daifu.transform
    def inner():
        return 1 / 0

    @daifu.transform
    def outer():
        return inner()

    with pytest.raises(ZeroDivisionError) as info:
        outer()
    assert len(seen) == 1 and seen[0].function_name == "inner"
    names = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
    assert names[-2:] == ["outer", "inner"]


def test_callee_crash_is_intercepted_at_the_calling_statement(decide):
    def model_step(x):
        return x["missing"]

    seen = decide(daifu.Skip())

    @daifu.transform
    def f():
        result = "untouched"
        result = model_step({})
        return result

    assert f() == "untouched"
    assert seen[0].statement == "result = model_step({})"
    assert "model_step" in seen[0].traceback_text


def test_closure_cells_are_shared_with_the_continuation(decide):
    decide(daifu.Action("factor = 10"))

    @daifu.transform
    def f():
        factor = 0
        scaled = lambda v: v * factor  # noqa: E731
        first = 5 // factor
        return first, scaled(2)

    assert f() == (0, 20)


def test_exception_inside_except_handler_and_else(decide):
    decide(daifu.Retry(), daifu.Retry())
    flaky = Flaky({1, 2})

    @daifu.transform
    def f():
        log = []
        try:
            raise KeyError("k")
        except KeyError as err:
            log.append(flaky(str(err)))
        try:
            log.append("body")
        except ValueError:
            pass
        else:
            log.append(flaky("else"))
        finally:
            log.append("finally")
        return log

    assert f() == ["'k'", "body", "else", "finally"]


def test_multiline_statement(decide):
    seen = decide(daifu.Skip())

    @daifu.transform
    def f():
        _value = int(
            "x",
        )
        return "skipped"

    assert f() == "skipped"
    assert seen[0].statement == '_value = int(\n    "x",\n)'
    assert seen[0].lineno == inspect.getsourcelines(f)[1] + 2


def test_deep_chain_of_resumes_does_not_grow_the_stack(decide):
    flaky = Flaky(set(range(2, 3000, 2)))
    seen = decide(*[daifu.Retry()] * 2000)

    @daifu.transform
    def f():
        total = 0
        for _ in range(3000):
            total += flaky(1) or 0
        return total

    assert f() == 3000
    assert len(seen) == 1499  # far deeper than the recursion limit, had each resume nested


def test_resuming_inside_a_running_finally_finishes_it_then_returns(decide):
    zero = [0]
    seen = decide(lambda crash: daifu.Action("zero[0] = 1"))

    @daifu.transform
    def f():
        try:
            value = 1
        finally:
            value = value / zero[0]
        return value

    assert f() == 1.0
    assert len(seen) == 1 and seen[0].statement == "value = value / zero[0]"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Python 3.10 code keeps no columns: a line's first statement")
def test_statements_sharing_a_line_are_told_apart_by_column(decide):
    seen = decide(daifu.Skip(), daifu.Retry())
    calls = []

    def boom(tag):
        calls.append(tag)
        if calls.count(tag) == 1 and tag in ("b", "body"):
            raise ValueError(tag)
        return tag

    @daifu.transform
    def f(items):
        a = boom("a"); b = boom("b"); c = boom("c")  # noqa: E702
        for item in items: boom("body")  # noqa: E701
        return a, c, "b" in locals()

    assert f([1]) == ("a", "c", False)  # `b = ...` skipped, not `a = ...` or `c = ...`
    assert [crash.kind for crash in seen] == ["statement", "statement"]  # the loop's body, not its header
    assert calls == ["a", "b", "c", "body", "body"]


def test_a_first_crash_at_any_site_compiles_nothing(decide, monkeypatch):
    """The continuation that resumes anywhere is compiled with the function; crashes at new sites,
    of every kind of resume point, reuse it."""
    from daifu.core.version import Version

    flaky = Flaky({1, 3, 5, 7})
    seen = decide(daifu.Retry(), daifu.Skip(), daifu.Retry(), daifu.Skip())

    @daifu.transform
    def f():
        out = []
        for i in range(3):
            if flaky(True):
                out.append(i)
            try:
                out.append(flaky(10 * i))
            finally:
                out.append("f")
        return out

    assert f.__daifu__.current.anywhere is not None  # compiled with the function
    compiled = []
    real = Version.compile_continuation
    monkeypatch.setattr(Version, "compile_continuation", lambda *a: compiled.append(a[1].name) or real(*a))
    assert f() == [0, "f", 1, 10, "f", 20, "f"]  # header retried; append skipped; call retried; `if` skipped
    assert [crash.kind for crash in seen] == ["if", "statement", "statement", "if"]
    assert compiled == []


def test_a_function_whose_resume_anywhere_code_cannot_compile_resumes_per_site(decide, monkeypatch):
    """Fault injection: the resume-anywhere continuation is nested in 25 more loops, which CPython's
    compiler refuses (too many statically nested blocks); the function is still vaccinated and a crash
    still resumes."""
    import ast

    from daifu.core import rewrite

    real = rewrite.Rewriter.anywhere

    def too_deep(self, fdef):
        tree, points = real(self, fdef)
        for _ in range(25):
            loop = ast.For(target=ast.Name("@x", ast.Store()), iter=ast.List([], ast.Load()), body=tree.body, orelse=[])
            tree.body = [ast.copy_location(loop, fdef)]
        ast.fix_missing_locations(tree)
        return tree, points

    monkeypatch.setattr(rewrite.Rewriter, "anywhere", too_deep)
    flaky = Flaky({2})
    decide(daifu.Retry())

    @daifu.transform
    def f():
        return [flaky(i) for i in range(3)] + [flaky("x")]

    assert f.__daifu__.current.anywhere is None
    assert f() == [0, 1, 2, "x"]


def test_zero_argument_super_works_after_a_resume(decide):
    """`super()` reads the frame's first local: a continuation takes the method's `self` first."""

    class Base:
        def step(self, x):
            return x + 1

        def scale(self):
            return 10

    flaky = Flaky({1, 3})
    decide(daifu.Retry(), daifu.Skip())

    class Trainer(Base):
        @daifu.transform
        def step(self, x, /, factor=1):
            flaky()
            total = super().step(x) * factor
            flaky()
            return total * super().scale()

    assert Trainer().step(1, factor=2) == 40  # Retry of the first call, Skip of the second
    assert Trainer().step(2) == 30


def test_zero_argument_super_works_after_a_resume_when_self_is_a_closure_cell(decide):
    class Base:
        def step(self, x):
            return x + 1

    flaky = Flaky({1})
    decide(daifu.Retry())

    class Trainer(Base):
        @daifu.transform
        def step(self, x):
            me = lambda: self  # noqa: E731 - `self` is a cell of the method
            flaky()
            return super().step(x) * 10 + (me() is self)

    assert Trainer().step(1) == 21


def test_a_form_feed_in_the_source_does_not_shift_the_statement_shown(decide):
    seen = decide(daifu.Retry())
    flaky = Flaky({1})
    namespace = {"flaky": flaky, "daifu": daifu}
    source = "def f():\n    x = 1\n    \f\n    y = flaky(x)\n    return y\n"
    import linecache

    lines = [line + "\n" for line in source.split("\n")[:-1]]  # as a file's readlines() has them
    linecache.cache["<form feed>"] = (len(source), None, lines, "<form feed>")
    exec(compile(source, "<form feed>", "exec"), namespace)
    f = daifu.transform(namespace["f"])
    assert f() == 1
    assert seen[0].statement == "y = flaky(x)"
