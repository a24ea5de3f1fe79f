"""Out of memory in training (issue 31 item 2): the step on micro-batches, tried in process, the full batch's update.

A CPU "out of memory" is raised by a memory guard of the test (a module that refuses more than 20 rows, as a
device that holds 20 would). The repair bot's generator proposes the training step on micro-batches (forward,
loss scaled by the micro-batch's share, backward; the optimizer step once); a policy tries it in process, as on a
GPU, and applies it; the parameters are then those of a run on a device that held the whole batch.
"""

from __future__ import annotations

import weakref
from typing import Any

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

import daifu
from daifu.core.trial import unavailable
from daifu.report.build import build_report
from repairbot.generate import generate
from tests.copies import fresh

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from tests.small_device import SmallDevice  # noqa: E402
nn = torch.nn
F = torch.nn.functional


def train(model, optimizer, batches):
    steps = 0
    for x, y in batches:
        out = model(x)
        loss = F.cross_entropy(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps += 1
    return steps, float(loss), out.shape[0]


def train_sliced(model, optimizer, x_all, y_all, sizes):
    for size in sizes:
        loss = F.cross_entropy(model(x_all[:size]), y_all[:size])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def setup() -> tuple[Any, Any, list[Any]]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(48, 6, generator=generator)
    y = (x @ torch.randn(6, 3, generator=generator)).argmax(dim=1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 3))
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), [(x[:16], y[:16]), (x, y), (x[16:], y[16:])]


def micro_batch_candidates(crash: daifu.Crash) -> list[Any]:
    found, _ = generate(build_report(crash))
    return [c for c in found if c.family == "accumulate"]


def test_the_training_step_on_micro_batches_tried_in_process_gives_the_full_batchs_parameters(
        capsys: pytest.CaptureFixture[str]) -> None:
    daifu.configure(trials="inprocess", trial_iterations=1)
    model, optimizer, batches = setup()
    verdicts: list[Any] = []
    codes: list[str] = []

    def policy(crash: daifu.Crash) -> Any:
        candidates = micro_batch_candidates(crash)
        codes.extend(c.code for c in candidates)
        for candidate in candidates:
            verdict = crash.trial(daifu.Surgery(candidate.code), 30.0)
            verdicts.append(verdict)
            if verdict.passed:
                return daifu.Surgery(candidate.code)
        return daifu.Raise()

    daifu.set_policy(policy)
    steps, loss, rows = daifu.transform(fresh(train))(SmallDevice(model[:], 20), optimizer, batches)

    assert "(loss * weight).backward()" in codes[0]
    assert "for start in range(0, x.shape[0], 24):" in codes[0]  # halves first: 24 rows still too many
    assert [v.outcome.value for v in verdicts] == ["raised", "completed"] and verdicts[1].kind == "in-process"
    assert steps == 3 and rows == 32  # the micro-batches' outputs joined: every row of the batch
    reference, reference_optimizer, _ = setup()
    expected = train(reference, reference_optimizer, batches)  # a device that holds the whole batch
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    assert abs(loss - expected[1]) < 1e-5
    assert "passed over" not in capsys.readouterr().err  # a micro-batch bound from the batch drops none of it


@pytest.mark.parametrize("trials", ["inprocess", "fork"])
def test_automatic_mode_recovers_the_out_of_memory_step_on_micro_batches(automatic, trials: str,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 31's acceptance, unattended: the real rules bot over HTTP, `approve="auto"`, each kind of trial."""
    if trials == "fork" and unavailable() is not None:
        pytest.skip(f"no fork trials here: {unavailable()}")
    daifu.configure(trials=trials, trial_iterations=1)
    model, optimizer, batches = setup()
    steps, loss, rows = daifu.transform(fresh(train))(SmallDevice(model[:], 20), optimizer, batches)

    [repair] = automatic()
    assert repair["decision"] == "Surgery" and repair["decided_by"] == "automatic" and repair["suggested_by"] == "bot"
    assert "for start in range(0, x.shape[0], 12):" in repair["code"]  # 24 rows were refused in its trial
    assert "(loss * weight).backward()" in repair["code"]
    assert steps == 3 and rows == 32
    reference, reference_optimizer, _ = setup()
    expected = train(reference, reference_optimizer, batches)
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    assert abs(loss - expected[1]) < 1e-5
    assert "calls the method `.backward()`" not in capsys.readouterr().err


def test_no_micro_batches_for_a_batch_the_step_slices_itself() -> None:
    model, optimizer, _ = setup()
    x = torch.randn(48, 6)
    y = torch.zeros(48, dtype=torch.long)
    found: list[Any] = []

    def policy(crash: daifu.Crash) -> Any:
        found.extend(micro_batch_candidates(crash))
        return daifu.Raise()

    daifu.set_policy(policy)
    with pytest.raises(torch.OutOfMemoryError):
        daifu.transform(fresh(train_sliced))(SmallDevice(model, 20), optimizer, x, y, [8, 40])
    assert found == []  # a micro-batch of `x_all` sliced `[:size]` again would be other rows


class Exhausted(nn.Module):
    """Runs out of memory after making its hidden activations, once; notes a weak reference to them."""

    def __init__(self) -> None:
        super().__init__()
        self.inner, self.made = nn.Linear(6, 64), []

    def forward(self, x):
        hidden = self.inner(x)
        if not self.made:
            self.made.append(weakref.ref(hidden))
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB.")
        return hidden


def train_noting(model, batches, alive):
    for x in batches:
        alive.append([ref() is not None for ref in model.made])
        model(x).sum().backward()


def test_the_activations_of_the_iteration_that_ran_out_of_memory_are_let_go_before_the_run_resumes() -> None:
    daifu.set_policy(lambda crash: daifu.SkipIteration())
    model = Exhausted()
    alive: list[list[bool]] = []
    daifu.transform(fresh(train_noting))(model, [torch.randn(4, 6) for _ in range(3)], alive)
    assert alive == [[], [False], [False]]  # the crashed forward's `hidden`, held by its traceback, is gone
