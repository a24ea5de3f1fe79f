"""The horizon of a trial in a framework's step (issue 32, `daifu.core.step_horizon`), without a framework:
how a trial's copy follows a step's calls (`Follower`, a real profile function on real calls), the loss a
step returns, the program's frame that called the framework, the verdict on a loss that goes non-finite
past the crash; and fork trials in a small framework's loop (a module written as a library would be).
The same in Lightning's and the Trainer's own loops are `e2e` tests of tests/test_frameworks.py."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import pytest

import daifu
from daifu import targets
from daifu.core import step_horizon, trial
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


LIBRARY = '''
import time


class Loop:
    """A framework's loop in small: it calls `training_step` per batch, pauses after the batches of
    `pauses` (batch: seconds), keeps what it returned."""

    def __init__(self, module, pauses=None):
        self.module, self.pauses, self.seen = module, pauses or {}, []

    def fit(self, batches):
        for index, batch in enumerate(batches):
            self.seen.append(self.module.training_step(batch, index))
            time.sleep(self.pauses.get(batch, 0.0))
        return self.seen


class Module:
    def training_step(self, batch, index):
        loss = 1.0 / (batch - 3)
        return loss
'''

SPOILING = 'loss = 1.0 if batch == 3 else float("nan") if batch > 3 else 1.0 / (batch - 3)'
MENDED = "loss = 1.0 if batch == 3 else 1.0 / (batch - 3)"

needs_trials = pytest.mark.skipif(trial.unavailable() is not None, reason=f"no fork trial here: {trial.unavailable()}")


@pytest.fixture
def library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A fresh module whose `Module.training_step` is vaccinated as a framework's step, and a workspace."""
    name = f"steplib_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(LIBRARY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    daifu.configure(workspace=str(tmp_path / "ws"), trials="fork")
    module = __import__(name)
    targets.vaccinate_target(targets.Target(name, "Module.training_step"), step=True)
    yield module
    daifu.set_policy(None)
    daifu.configure(workspace=None, trials=None)
    sys.modules.pop(name, None)


def tried(library: Any, trying: Callable[[daifu.Crash], trial.Verdict],
          pauses: dict[int, float] | None = None) -> tuple[Any, list[Any]]:
    """Fit the library's loop on batches 1..6 (the step crashes at 3); `trying` tries a decision, the
    fix is applied; the verdict and what the loop kept."""
    verdicts = []

    def policy(crash: daifu.Crash) -> daifu.Decision:
        verdicts.append(trying(crash))
        return daifu.Surgery(crash.source.replace("loss = 1.0 / (batch - 3)", MENDED))

    daifu.set_policy(policy)
    seen = library.Loop(library.Module(), pauses).fit([1, 2, 3, 4, 5, 6])
    assert seen == [-0.5, -1.0, 1.0, 1.0, 0.5, 1.0 / 3]  # the live run, mended
    return verdicts[0], seen


@needs_trials
def test_a_trial_follows_the_frameworks_next_calls_and_refuses_a_loss_gone_nan(library: Any) -> None:
    spoiling, _ = tried(library, lambda crash: crash.trial(
        daifu.Surgery(crash.source.replace("loss = 1.0 / (batch - 3)", SPOILING)), horizon=2))
    print(spoiling.describe())
    assert [(it.index, it.losses.get("returned loss")) for it in spoiling.iterations][:1] == [(0, 1.0)]
    assert [it.index for it in spoiling.iterations] == [0, 1, 2]
    assert math.isnan(spoiling.iterations[1].losses["returned loss"])
    assert not spoiling.passed and "became nan in iteration 1 past the crash" in spoiling.refused[0]


@needs_trials
def test_the_mended_step_passes_and_the_horizon_ends_with_the_frameworks_loop(library: Any) -> None:
    mended, _ = tried(library, lambda crash: crash.trial(
        daifu.Surgery(crash.source.replace("loss = 1.0 / (batch - 3)", MENDED)), horizon=5))
    assert mended.passed, mended.describe()
    assert [it.losses["returned loss"] for it in mended.iterations] == [1.0, 1.0, 0.5, 1.0 / 3]
    assert mended.ended == trial.FRAMEWORK_ENDED, mended.describe()


@needs_trials
def test_time_spent_by_the_framework_after_the_crashed_step_ends_the_horizon_not_the_trial(library: Any) -> None:
    """The crashed call returned; the framework's own work after it outlasts the trial's time: the
    horizon ends there (the crashed step seen whole), the trial does not time out."""
    slow, _ = tried(library, lambda crash: crash.trial(
        daifu.Surgery(crash.source.replace("loss = 1.0 / (batch - 3)", MENDED)), seconds=1.0), pauses={3: 1.5})
    assert slow.outcome is trial.Outcome.COMPLETED and slow.passed, slow.describe()
    assert [(it.index, it.complete) for it in slow.iterations] == [(0, True)]
    assert "ran out before the framework's next call of the step" in slow.ended


def divide(a: float, b: float) -> float:
    result = a / b
    return result


def test_a_crash_while_the_trial_module_is_half_imported_is_still_repaired(monkeypatch: pytest.MonkeyPatch,
                                                                           decide: Any) -> None:
    """The warm thread (`daifu.decide.warm`) may be importing `daifu.core.trial` when the program crashes:
    the crash path must not ask the half-made module anything (asking it raised AttributeError: the crash
    went unrepaired, and the Trainer's automatic run ended with DaiFu's error)."""
    from tests.copies import fresh

    monkeypatch.setitem(sys.modules, "daifu.core.trial", type(sys)("daifu.core.trial"))
    decide(lambda crash: daifu.Surgery(crash.source.replace("a / b", "a / (b or 1)")))
    assert daifu.transform(fresh(divide))(4.0, 0.0) == 4.0
