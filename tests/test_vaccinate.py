"""`@daifu.transform` without a crash: the vaccinated function behaves exactly as the original."""

from __future__ import annotations

import inspect
import sys
import threading
import traceback
import warnings

import pytest

import daifu
from tests.copies import fresh

GLOBAL_COUNTER = 0


def both(fn):
    """The plain function and its vaccinated twin (compiled from the same source)."""
    return fn, daifu.transform(fresh(fn))


def test_decorator_forms_vaccinate_the_function_itself_and_keep_its_metadata():
    def make():
        def plain(a, b=2, *args, c, d=4, **kw):
            "The docstring."
            return a, b, args, c, d, kw

        return plain

    for form in (daifu.transform, daifu.transform(), daifu.transform(globals())):
        plain = make()
        signature, code = inspect.signature(plain), plain.__code__
        vaccinated = form(plain)
        assert vaccinated is plain and plain.__code__ is not code and plain.__daifu__ is not None
        assert vaccinated.__name__ == "plain" and vaccinated.__doc__ == "The docstring."
        assert inspect.signature(vaccinated) == signature
        assert vaccinated(1, c=3) == (1, 2, (), 3, 4, {})
        assert vaccinated(1, 5, 6, c=3, e=7) == (1, 5, (6,), 3, 4, {"e": 7})


def test_nothing_is_added_to_the_module_globals():
    before = set(globals())

    @daifu.transform
    def f(x):
        for i in range(x):
            with open(__file__):
                x += i
        return x

    assert f(3) == 6
    assert set(globals()) - before == set()


def test_closures_see_rebinds_and_nonlocal_and_global():
    def plain():
        global GLOBAL_COUNTER
        value = 1
        read = lambda: value  # noqa: E731
        value = 2
        first = read()

        def bump():
            nonlocal value
            value += 10

        bump()
        GLOBAL_COUNTER += 1
        return first, read(), value

    original, vaccinated = both(plain)
    start = GLOBAL_COUNTER
    assert original() == vaccinated() == (2, 12, 12)
    assert GLOBAL_COUNTER == start + 2


def test_nested_function_reaching_its_enclosing_scope():
    def outer():
        total = 0

        @daifu.transform
        def add(n):
            nonlocal total
            total += n
            return total

        add(2)
        add(3)
        return total

    assert outer() == 5


def test_recursion_and_defaults():
    @daifu.transform
    def fact(n, acc=1):
        if n <= 1:
            return acc
        return fact(n - 1, acc * n)

    assert fact(10) == 3628800


def module_level_fact(n):
    if n <= 1:
        return 1
    return n * module_level_fact(n - 1)


def test_a_module_level_function_that_calls_itself_is_vaccinated():
    """Its own name is a module global in its code, not a variable of the scope DaiFu compiles it in."""
    vaccinated = daifu.transform(fresh(module_level_fact))
    assert vaccinated.__daifu__ is not None and vaccinated(10) == 3628800
    assert vaccinated.__code__.co_freevars == ()


def test_calls_from_several_threads():
    @daifu.transform
    def work(seed):
        out = []
        for i in range(2000):
            out.append((seed * 31 + i) % 7)
        return sum(out)

    results = {}
    threads = [threading.Thread(target=lambda s=s: results.__setitem__(s, work(s))) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {s: sum((s * 31 + i) % 7 for i in range(2000)) for s in range(8)}


def test_control_flow_constructs():
    def plain(items):
        trace = []
        for x in items:
            if x == 3:
                continue
            if x == 7:
                break
            trace.append(x)
        else:
            trace.append("for-else")
        n = 0
        while n < 3:
            n += 1
        else:
            trace.append("while-else")
        try:
            trace.append(1 / (len(items) - len(items)))
        except ZeroDivisionError as err:
            trace.append(type(err).__name__)
        else:
            trace.append("no")
        finally:
            trace.append("finally")
        try:
            trace.append("body")
        except ValueError:
            trace.append("no")
        else:
            trace.append("else")
        if (m := len(trace)) > 3:
            trace.append(m)
        trace.append([y * 2 for y in items if y % 2])
        trace.append({y: y for y in items[:2]})
        trace.append(sum(y for y in items))
        temp = 5
        del temp
        try:
            print(temp)
        except NameError:
            trace.append("deleted")
        match len(items):
            case 0:
                trace.append("empty")
            case _:
                trace.append("some")
        with open(__file__) as fh, open(__file__) as gh:
            trace.append(fh.closed or gh.closed)
        trace.append(fh.closed and gh.closed)
        return trace

    original, vaccinated = both(plain)
    for items in ([1, 2, 3, 4], [1, 7, 2], [], [3, 5]):
        assert vaccinated(list(items)) == original(list(items))


def test_return_inside_finally_and_with():
    def plain(flag):
        log = []
        try:
            with open(__file__):
                if flag:
                    return "early", log
                log.append("body")
        finally:
            log.append("finally")
        return "late", log

    original, vaccinated = both(plain)
    assert vaccinated(True) == original(True) == ("early", ["finally"])
    assert vaccinated(False) == original(False)


class Manager:
    """A context manager that logs what the `with` statement does with it, and can misbehave."""

    def __init__(self, log, suppress=False, fail_enter=False, fail_exit=False, value=None):
        self.log, self.suppress, self.value = log, suppress, value
        self.fail_enter, self.fail_exit = fail_enter, fail_exit

    def __enter__(self):
        self.log.append("enter")
        if self.fail_enter:
            raise OSError("enter failed")
        return self if self.value is None else self.value

    def __exit__(self, kind, value, tb):
        handled = sys.exc_info()[1]
        self.log.append(("exit", kind and kind.__name__, handled is value, tb is (value and value.__traceback__)))
        if self.fail_exit:
            raise RuntimeError("exit failed")
        return self.suppress


WITH_CASES = {
    "plain": {}, "break": {}, "continue": {}, "return": {}, "raise": {}, "suppress": {"suppress": True},
    "fail_enter": {"fail_enter": True}, "fail_exit": {"fail_exit": True},
    "fail_exit_on_error": {"fail_exit": True}, "bad_unpacking": {},
}


def with_statements(case, log):
    out = []
    for i in range(3):
        with Manager(log, **WITH_CASES[case]) as m:
            log.append(f"body {i} {type(m).__name__}")
            if case == "break" and i == 1:
                break
            if case == "continue" and i == 0:
                continue
            if case == "return" and i == 1:
                return out, "returned"
            if case in ("raise", "suppress", "fail_exit_on_error") and i == 1:
                raise KeyError(i)
            if case == "bad_unpacking" and i == 1:
                with Manager(log, value=(1, 2, 3)) as (first, second):  # noqa: F841
                    log.append("unreachable")
            with Manager(log):
                log.append("nested")
        out.append(i)
    return out, "done"


def outcome(fn, *args):
    """What calling `fn` did: its result, or its exception's type, message, context and cause."""
    try:
        return "returned", fn(*args)
    except Exception as error:
        context = error.__context__
        return "raised", type(error).__name__, str(error), type(context).__name__ if context else None, error.__cause__


def test_with_statements_behave_as_in_plain_python(decide):
    """Every way of entering and leaving a `with`, with no repair taken: the same calls of `__enter__`
    and `__exit__`, with the same arguments and `sys.exc_info()`, the same result or exception."""
    seen = decide()  # every crash: Raise
    original, vaccinated = both(with_statements)
    for case in WITH_CASES:
        plain_log, vaccinated_log = [], []
        expected = outcome(original, case, plain_log)
        assert outcome(vaccinated, case, vaccinated_log) == expected, case
        assert vaccinated_log == plain_log, case
    offered = {crash.exception_type for crash in seen}
    assert offered == {"KeyError", "OSError", "ValueError"}  # never the errors of `__exit__` (RuntimeError)


def test_a_with_on_no_context_manager_raises_what_python_raises(decide):
    decide()  # the crash at the `with`: Raise

    def plain(thing):
        with thing:
            return "inside"

    original, vaccinated = both(plain)
    for thing in (42, type("OnlyEnter", (), {"__enter__": lambda self: self})()):
        kind, message = outcome(vaccinated, thing)[1:3]
        assert (kind, message) == outcome(original, thing)[1:3]  # AttributeError on 3.10, TypeError since
        assert kind in ("TypeError", "AttributeError") and message


def test_escaping_exception_is_unchanged():
    def plain(d):
        x = 1
        return d["missing"] + x

    original, vaccinated = both(plain)
    with pytest.raises(KeyError) as plain_info:
        original({})
    with pytest.raises(KeyError) as vaccinated_info:
        vaccinated({})
    lines = lambda info: [(f.name, f.lineno, f.line) for f in traceback.extract_tb(info.value.__traceback__)][1:]  # noqa: E731
    assert lines(vaccinated_info) == lines(plain_info)
    assert vaccinated_info.value.__context__ is None and vaccinated_info.value.__cause__ is None


def test_user_handlers_catch_before_daifu(decide):
    seen = decide(daifu.Retry())

    @daifu.transform
    def f():
        caught = []
        try:
            raise ValueError("mine")
        except Exception as err:
            caught.append(str(err))
        try:
            try:
                {}["k"]
            finally:
                caught.append("inner finally")
        except KeyError:
            caught.append("outer handler")
        try:
            raise KeyError("k")
        except (TypeError, KeyError):
            caught.append("tuple")
        finally:
            caught.append("finally")
        return caught

    assert f() == ["mine", "inner finally", "outer handler", "tuple", "finally"]
    assert seen == []


def test_methods_static_and_class_methods_and_super():
    class Base:
        def hello(self):
            return "base"

    class Model(Base):
        scale = 3

        @daifu.transform
        def forward(self, x):
            return x * self.scale

        @daifu.transform
        def hello(self):
            return "child of " + super().hello()

        @staticmethod
        @daifu.transform
        def helper(x):
            return x + 1

        @daifu.transform
        @classmethod
        def build(cls):
            return cls.scale

    model = Model()
    assert model.forward(2) == 6
    assert model.hello() == "child of base"
    assert Model.helper(1) == 2
    assert Model.build() == 3


def test_generators_and_async_are_refused_with_a_clear_message():
    def gen():
        yield 1

    async def coro():
        return 1

    with pytest.raises(TypeError, match="'.*gen'.*generator"):
        daifu.transform(gen)
    with pytest.raises(TypeError, match="'.*coro'.*async"):
        daifu.transform(coro)


def test_function_without_source_runs_unvaccinated_with_a_warning():
    namespace = {}
    # a file name no other test uses: under 3.13 the lines of another `exec` of "<string>" in the same
    # process were found in linecache for it (the suite in one worker), and read as this function's
    exec(compile("def made(x):\n    return x * 2\n", "<made without a source file>", "exec"), namespace)
    with pytest.warns(RuntimeWarning, match="made.*cannot be read"):
        result = daifu.transform(namespace["made"])
    assert result is namespace["made"] and result(2) == 4


def test_mode_off_returns_the_function_untouched():
    def f():
        return 1

    daifu.configure(mode="off")
    assert daifu.transform(f) is f


def test_keyboard_interrupt_and_system_exit_pass_untouched(decide):
    seen = decide(daifu.Retry(), daifu.Retry())

    @daifu.transform
    def f(kind):
        raise kind()

    for kind in (KeyboardInterrupt, SystemExit):
        with pytest.raises(kind):
            f(kind)
    assert seen == []


def test_no_warnings_and_no_trace_function_left():
    @daifu.transform
    def f(n):
        return sum(range(n))

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert f(10) == 45
    assert sys.gettrace() is None
