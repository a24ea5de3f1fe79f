"""The horizon of a trial in a framework's step (issue 32, `daifu.core.step_horizon`): the pieces that
need no framework. How a trial's copy follows a step's calls (`Follower`, a real profile function on
real calls), the loss a step returns, the program's frame that called the framework, and the verdict
on a loss that goes non-finite past the crash. The whole, in Lightning's own loop, is an `e2e` test of
tests/test_frameworks.py."""

from __future__ import annotations

import math
import sys
from types import CodeType, FrameType
from typing import Any

import pytest

from daifu.core import step_horizon
from daifu.core.horizon import IterationFacts, judge
from daifu.core.step_horizon import Calls, Follower, anchor, returned_losses


def step(index: int) -> float:
    loss = 1.0 / (index + 1)
    return loss


def bookkeeping(value: float) -> float:
    return value * 2


def framework(steps: int, fail_after: int | None = None) -> list[float]:
    """A framework's loop in small: it calls the step, then code of its own, per batch."""
    seen = []
    for index in range(steps):
        seen.append(bookkeeping(step(index)))
        if index == fail_after:
            raise RuntimeError("the framework failed")
    return seen


class Recorded:
    """What a `Follower` reported."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def started(self, frame: FrameType) -> None:
        self.events.append(("started", frame.f_locals["index"]))

    def over(self, frame: FrameType, losses: dict[str, float]) -> None:
        self.events.append(("over", losses))

    def ended(self, raised: bool) -> None:
        self.events.append(("ended", raised))


def is_step(code: CodeType) -> bool:
    return code is step.__code__


def follow(steps: int, fail_after: int | None = None) -> list[tuple[str, Any]]:
    recorded = Recorded()
    follower = Follower(Calls(is_step, sys._getframe()), recorded.started, recorded.over, recorded.ended)
    previous = sys.getprofile()
    sys.setprofile(follower)  # here: `install`'s own return into this frame would end the loop it follows
    try:
        framework(steps, fail_after)
    except RuntimeError:
        pass
    finally:
        sys.setprofile(previous)
    return recorded.events


def test_each_call_of_the_step_is_an_iteration_and_the_frameworks_return_ends_them() -> None:
    assert follow(2) == [("started", 0), ("over", {"returned loss": 1.0}), ("started", 1),
                         ("over", {"returned loss": 0.5}), ("ended", False)]


def test_an_exception_that_leaves_the_framework_is_told_from_a_return() -> None:
    assert follow(3, fail_after=0) == [("started", 0), ("over", {"returned loss": 1.0}), ("ended", True)]


def test_the_loss_a_step_returns() -> None:
    torch = pytest.importorskip("torch")
    assert returned_losses(torch.tensor(2.5)) == {"returned loss": 2.5}
    assert returned_losses((torch.tensor([1.5]), {"logits": torch.zeros(3)})) == {"returned loss": 1.5}
    assert returned_losses({"loss": 0.25, "log": 1}) == {"returned loss": 0.25}
    assert math.isnan(returned_losses(torch.tensor(float("nan")))["returned loss"])
    assert returned_losses(None) == returned_losses(torch.zeros(2)) == returned_losses(torch.tensor(3)) == {}


def test_the_anchor_is_the_programs_frame_outside_the_step() -> None:
    def inner() -> FrameType:
        return sys._getframe()

    crashed = inner()
    here = sys._getframe()
    assert anchor(crashed, lambda code: False, lambda filename: True) is here
    assert anchor(crashed, lambda code: code is here.f_code, lambda filename: True) is here.f_back
    assert anchor(crashed, lambda code: False, lambda filename: False) is None


def test_a_loss_finite_at_the_end_of_the_crashed_step_that_goes_nan_past_it_is_refused() -> None:
    returned = "returned loss"
    healthy = [IterationFacts(0, losses={returned: 0.7}), IterationFacts(1, losses={returned: 0.69})]
    assert judge(healthy, 1, {}) == ()
    spoilt = [*healthy, IterationFacts(2, losses={returned: math.nan})]
    assert judge(spoilt, 1, {}) == (f"`{returned}` became nan in iteration 2 past the crash (it was 0.7 at the end "
                                    "of the crashed iteration)",)
    assert step_horizon.StepReturned(3).resume({}) == 3
