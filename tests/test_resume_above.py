"""A surgery that fixes the cause a line or two above the crash: the run resumes at the first
changed statement earlier in the interrupted iteration, however deep the faulty statement sits
(`surgery.resume_path`, its derived form, segments and continuations alike)."""

from __future__ import annotations

import inspect
import textwrap
from typing import Any

import pytest

import daifu
from tests.test_resume import Flaky, Tracked


def source_of(fn: Any, old: str, new: str) -> str:
    source = inspect.getsource(fn)
    assert old in source
    return source.replace(old, new)


def plain(source: str, name: str, scope: dict[str, Any]) -> Any:
    """The function `name` of `source` (a `def` decorated with `@daifu.transform`), undecorated."""
    namespace = dict(scope)
    lines = [line for line in textwrap.dedent(source).splitlines(True) if not line.lstrip().startswith("@daifu")]
    exec(compile("".join(lines), "<fixed>", "exec"), namespace)
    return namespace[name]


@pytest.mark.torch
def test_the_issue_example_resumes_at_the_clamp_and_finishes_as_the_fixed_program() -> None:
    torch = pytest.importorskip("torch")
    nn = torch.nn

    @daifu.transform
    def train(x, y):
        torch.manual_seed(0)
        model = nn.Linear(1, 1); opt = torch.optim.SGD(model.parameters(), lr=2.0); steps = 0  # noqa: E702
        for step in range(40):
            p = torch.sigmoid(model(x)).squeeze(1)
            loss = -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()
            if not torch.isfinite(loss):
                raise FloatingPointError(f"Loss is {loss.item()}, stopping training")
            opt.zero_grad(); loss.backward(); opt.step(); steps += 1  # noqa: E702
        return steps

    fixed = source_of(train, "p = torch.sigmoid(model(x)).squeeze(1)\n",
                      "p = torch.sigmoid(model(x)).squeeze(1).clamp(1e-6, 1 - 1e-6)\n")
    seen: list[daifu.Crash] = []
    daifu.set_policy(lambda crash: seen.append(crash) or daifu.Surgery(fixed))
    x = torch.linspace(-20, 20, 64).unsqueeze(1)
    y = (x[:, 0] > 0).float()
    expected = plain(fixed, "train", {"torch": torch, "nn": nn})(x, y)
    assert train(x, y) == expected == 40
    assert len(seen) == 1  # the crash did not come back


def test_a_change_above_an_if_holding_the_crash_runs_from_the_change(decide) -> None:
    log: list[Any] = []

    @daifu.transform
    def f(items):
        total = 0
        for item in items:
            scale = 0
            log.append(("scaled", item))
            if item > 1:
                total += item // scale
        return total

    seen = decide(daifu.Surgery(source_of(f, "scale = 0", "scale = 2")))
    assert f([1, 2, 4]) == 1 + 2
    assert len(seen) == 1 and seen[0].locals["item"] == 2
    # The statement between the change and the crash runs again (issue 34): no earlier one does.
    assert log == [("scaled", 1), ("scaled", 2), ("scaled", 2), ("scaled", 4)]


def test_a_change_above_a_with_holding_the_crash_exits_it_first(decide) -> None:
    log: list[Any] = []

    @daifu.transform
    def f(items):
        total = 0
        for item in items:
            scale = 0
            with Tracked(log, "outer"):
                with Tracked(log, "inner"):
                    total += item // scale
                log.append("after inner")
        return total

    decide(daifu.Surgery(source_of(f, "scale = 0", "scale = 1")))
    assert f([3, 4]) == 7
    # Entered, left as a `continue` would leave them (innermost first), entered again from the change.
    assert log == ["enter outer", "enter inner", "exit inner None", "exit outer None",
                   "enter outer", "enter inner", "exit inner None", "after inner", "exit outer None",
                   "enter outer", "enter inner", "exit inner None", "after inner", "exit outer None"]


def test_a_with_completed_before_the_one_that_crashed_is_not_exited_again(decide) -> None:
    log: list[Any] = []

    @daifu.transform
    def f():
        scale = 0
        with Tracked(log, "done"):
            log.append("first")
        with Tracked(log, "open"):
            return 6 // scale

    decide(daifu.Surgery(source_of(f, "scale = 0", "scale = 3")))
    assert f() == 2
    assert log == ["enter done", "first", "exit done None", "enter open", "exit open None",
                   "enter done", "first", "exit done None", "enter open", "exit open None"]


def test_a_change_in_a_try_body_reruns_the_try_whose_handler_crashed(decide) -> None:
    @daifu.transform
    def f(values):
        out = []
        for v in values:
            try:
                ratio = 10 // v
            except ZeroDivisionError:
                out.append(len(ratio))
            else:
                out.append(ratio)
        return out

    seen = decide(daifu.Surgery(source_of(f, "ratio = 10 // v", "ratio = 10 // (v or 5)")))
    assert f([5, 0, 2]) == [2, 2, 5]
    assert len(seen) == 1


def test_a_change_outside_the_interrupted_iteration_does_not_start_it_over(decide) -> None:
    log: list[Any] = []
    flaky = Flaky({2})

    @daifu.transform
    def f(rows):
        total = 0
        for row in rows:
            width = 1
            for value in row:
                log.append(value)
                total += flaky(value) * width
        return total

    decide(daifu.Surgery(source_of(f, "width = 1", "width = 2")))
    # The inner loop goes on (the crashed statement runs again): it is not started over for a
    # change above it, which the next row's iteration runs.
    assert f([[4, 6], [8]]) == 4 + 6 + 8 * 2
    assert log == [4, 6, 8]


def test_a_change_above_a_try_finally_holding_the_crash_leaves_the_finally_to_run_once(decide) -> None:
    log: list[Any] = []
    flaky = Flaky({2})

    @daifu.transform
    def f(items):
        total = 0
        for item in items:
            scale = 1
            try:
                total += flaky(item) * scale
            finally:
                log.append(("finally", item))
        return total

    decide(daifu.Surgery(source_of(f, "scale = 1", "scale = 10")))
    assert f([1, 2, 3]) == 1 + 2 + 30  # resumed in the `try`, whose `finally` would not run if left
    assert log == [("finally", 1), ("finally", 2), ("finally", 3)]


def test_a_skip_after_a_surgery_resuming_above_an_open_with_is_refused(decide) -> None:
    log: list[Any] = []

    @daifu.transform
    def f():
        scale = 0
        with Tracked(log, "cm"):
            return 6 // scale

    fixed = source_of(f, "scale = 0", "scale = 2")
    skipped = daifu.Plays((daifu.Surgery(fixed), daifu.Skip()))
    seen = decide(lambda crash: crash.check(skipped) and skipped, daifu.Surgery(fixed))  # said by the dry run too
    assert f() == 3
    assert "a skip cannot follow a surgery" in seen[0].tried[0][1]
    assert log == ["enter cm", "exit cm None", "enter cm", "exit cm None"]


def test_the_terminal_says_inserted_lines_run_once_and_only_the_others_a_second_time() -> None:
    from daifu.decide.reruns import Rerun, describe

    inserted, kept = Rerun(63, "x, y = x[keep], y[keep]", new=True), Rerun(65, "logits = model(x)")
    assert describe([inserted, kept]) == ("line 63 `x, y = x[keep], y[keep]` (new) runs first, then line 65 "
                                          "`logits = model(x)` runs a second time (the repair resumes above the crash)")
    assert describe([kept]) == "line 65 `logits = model(x)` runs a second time (the repair resumes above the crash)"
