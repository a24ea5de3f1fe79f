"""The one `.backward()` a repair may call without a person: the step's gradients accumulated over micro-batches.

The crash is real (a training step whose model refuses more than 20 rows, as a device that holds 20 would), the
candidate is the repair bot generator's own micro-batch surgery for it. That shape is admitted; each change that
breaks its arithmetic (the shares no longer summing to one, a micro-batch skipped or seen twice, another quantity
backpropagated, the program's own backward pass kept beside it) sends the `.backward()` call back to a person.
"""

from __future__ import annotations

import dataclasses
import traceback

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

from daifu.core.crash import Crash
from daifu.decide.allowlist import check_surgery_safety, context_for
from daifu.decide.allowlist_context import Context
from daifu.report.build import build_report
from repairbot.generate import generate
from tests.botfixtures import crash_from

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from tests.small_device import SmallDevice  # noqa: E402
nn = torch.nn
F = torch.nn.functional


def train(model, optimizer, batches):
    for x, y in batches:
        out = model(x)
        loss = F.cross_entropy(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss


@pytest.fixture(scope="module")
def crash() -> Crash:
    model = SmallDevice(nn.Linear(6, 3), 20)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = (torch.randn(32, 6), torch.randint(0, 3, (32,)))
    crashed = crash_from(train, model, optimizer, [batch])
    frame = next(f for f, _ in traceback.walk_tb(crashed.exception.__traceback__) if f.f_code is train.__code__)
    return dataclasses.replace(crashed, frame=frame)


@pytest.fixture(scope="module")
def context(crash: Crash) -> Context:
    return context_for(crash)


@pytest.fixture(scope="module")
def generated(crash: Crash) -> str:
    """The generator's micro-batch surgery of 16 rows for this crash."""
    found, _ = generate(build_report(crash))
    return next(c.code for c in found if c.family == "accumulate" and "x.shape[0], 16)" in c.code)


def backward_refused(source: str, context: Context) -> bool:
    return any("`.backward()`" in reason for reason in check_surgery_safety(source, context).reasons)


def test_the_generators_micro_batch_step_is_admitted(generated: str, context: Context) -> None:
    assert "(loss * weight).backward()" in generated
    assert check_surgery_safety(generated, context).ok, check_surgery_safety(generated, context).reasons


BROKEN = {
    "shares that do not sum to one": ("weight = x_part.shape[0] / x.shape[0]", "weight = 1.0"),
    "micro-batches that overlap": ("x_part = x[start:start + 16]", "x_part = x[start:start + 32]"),
    "the first micro-batch skipped": ("range(0, x.shape[0], 16)", "range(16, x.shape[0], 16)"),
    "another quantity backpropagated": ("(loss * weight).backward()", "(out.sum() * weight).backward()"),
    "the running total backpropagated": ("(loss * weight).backward()", "(total * weight).backward()"),
    "arguments to the backward pass": ("(loss * weight).backward()", "(loss * weight).backward(retain_graph=True)"),
    "a weight rebound in the loop": ("(loss * weight).backward()", "weight = weight * 2\n            (loss * weight).backward()"),
    "the batch rebound in the loop": ("(loss * weight).backward()", "x = x_part\n            (loss * weight).backward()"),
    "a micro-batch left early": ("(loss * weight).backward()", "(loss * weight).backward()\n            if start > 0:\n                break"),
    "the program's backward kept too": ("        optimizer.step()", "        loss.backward()\n        optimizer.step()"),
}


@pytest.mark.parametrize("change", list(BROKEN), ids=list(BROKEN))
def test_a_micro_batch_step_whose_arithmetic_is_broken_needs_a_person(change: str, generated: str,
                                                                        context: Context) -> None:
    old, new = BROKEN[change]
    assert old in generated
    assert backward_refused(generated.replace(old, new, 1), context)


def test_a_backward_pass_outside_a_micro_batch_loop_needs_a_person(crash: Crash, context: Context) -> None:
    twice = crash.source.replace("loss.backward()", "(loss * 0.5).backward()\n        (loss * 0.5).backward()", 1)
    assert backward_refused(twice, context)
