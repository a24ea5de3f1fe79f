"""Every message of the runtime and of its checks of a repair names the lines of the user's file,
never a line counted from the start of the function's source (the decorator's) or of a method
dedented; the lines of an action, which has no place in a file, are said to be the action's."""

from __future__ import annotations

import inspect

import pytest

import daifu
from daifu.core.surgery import refusals

SOURCE = "def halves(xs):\n    n = len(xs) / 2\n    for _ in range(1):\n        head = xs[:n]\n    return head\n"
METHOD = ("    @staticmethod\n    def halves(xs):\n        n = len(xs) / 2\n        for _ in range(1):\n"
          "            head = xs[:n]\n        return head\n")


@pytest.mark.parametrize("source, first, broken_line", [(SOURCE, 10, 13), (METHOD, 40, 44)])
def test_a_surgery_that_does_not_compile_is_refused_at_its_file_line(source: str, first: int, broken_line: int) -> None:
    new = source.replace("xs[:n]", "xs[:n")
    assert refusals(source, first, "f.py", new, broken_line, ()) == [
        f"the new source does not compile: line {broken_line}: '[' was never closed"
    ]


def test_a_changed_loop_header_is_named_by_its_file_line() -> None:
    new = SOURCE.replace("range(1)", "range(2)")
    assert "the enclosing `for` statement at line 12," in refusals(SOURCE, 10, "f.py", new, 13, ())[0]


def test_a_change_outside_the_block_that_crashed_is_named_by_the_file_line_of_the_crash() -> None:
    pytest.importorskip("pydantic")
    from daifu.decide.suggestions import check_surgery
    from repairbot.protocol import FunctionInfo

    function = FunctionInfo(name="halves", qualname="halves", source=SOURCE, filename="f.py", first_lineno=10,
                            lineno=13, statement="        head = xs[:n]\n", kind="statement")
    wide = check_surgery(SOURCE.replace("len(xs) / 2", "len(xs) // 2"), function)
    assert wide.reasons == ("the surgery changes code outside the block that contains line 13 "
                            "(a wider change needs a person's approval)",)


def test_the_runtime_refuses_a_surgery_naming_the_file_line_it_does_not_compile_at(decide) -> None:
    @daifu.transform
    def f(xs):
        total = 0
        for x in xs:
            total += 1 / x
        return total

    source, first = inspect.getsourcelines(f)
    broken = next(n for n, line in enumerate(source, first) if "1 / x" in line)
    seen = decide(daifu.Surgery("".join(source).replace("1 / x", "1 / (x")), daifu.Skip())
    assert f([0, 1]) == 1
    assert seen[0].tried[0][1] == f"refused: the new source does not compile: line {broken}: '(' was never closed"


def test_an_action_that_does_not_parse_says_the_line_is_the_actions(decide) -> None:
    @daifu.transform
    def f(xs):
        return 1 / xs[0]

    seen = decide(daifu.Action("xs = [1]\nxs = ("), daifu.Action("xs = [2]"))
    assert f([0]) == 0.5
    assert seen[0].tried[0][1] == "refused: the action does not parse: line 2 of the action: '(' was never closed"
    assert seen[0].check(daifu.Action("x = 1\ny = (")) == (
        "the action does not parse: line 2 of the action: '(' was never closed")
