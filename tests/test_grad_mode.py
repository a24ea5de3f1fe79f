"""Gradient tracking left off by an evaluation: turned on again where the iteration starts, the step redone.

`evaluate` calls `torch.set_grad_enabled(False)` and never turns tracking back on, so the next step's loss
has no graph and its backward raises torch's own "element 0 of tensors does not require grad and does not
have a grad_fn". In automatic mode the embedded bot's candidate turns tracking on at the top of the loop's
body and the run resumes there: the step's forward pass is made again with a graph, and the run ends with
the weights of the program whose evaluation keeps its `no_grad` to itself. With tracking on, the same
message (a loss made from a detached output) gets no such candidate: turning tracking on would not help.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

torch = pytest.importorskip("torch")

import daifu
from daifu.core import trial
from daifu.report.build import build_report
from repairbot.generate import generate
from tests.botfixtures import crash_from
from tests.copies import fresh
nn = torch.nn
F = torch.nn.functional


@pytest.fixture(autouse=True)
def tracking_restored() -> Iterator[None]:
    """Each program here may leave tracking off in the test's thread, as the bug does: put it back."""
    yield
    torch.set_grad_enabled(True)


def evaluate(model, x, y):
    torch.set_grad_enabled(False)
    return (model(x).argmax(1) == y).float().mean().item()


def evaluate_scoped(model, x, y):
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def fit(model, optimizer, batches, scores):
    for step, (x, y) in enumerate(batches):
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 4 == 3:
            scores.append(evaluate(model, x, y))
    return loss.item()


def fit_scoped(model, optimizer, batches, scores):
    for step, (x, y) in enumerate(batches):
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 4 == 3:
            scores.append(evaluate_scoped(model, x, y))
    return loss.item()


def batches() -> list[tuple[Any, Any]]:
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(96, 4, generator=generator)
    y = (x[:, 0] + x[:, 2] > 0).long()
    return [(x[i : i + 8], y[i : i + 8]) for i in range(0, 96, 8)]


def run(program: Any) -> tuple[float, Any, list[float]]:
    torch.set_grad_enabled(True)  # the buggy program's last evaluation leaves it off
    torch.manual_seed(4)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scores: list[float] = []
    return program(model, optimizer, batches(), scores), model, scores


@pytest.mark.skipif(trial.unavailable() is not None, reason=f"no trials here: {trial.unavailable()}")
def test_tracking_left_off_is_turned_on_where_the_iteration_starts(automatic) -> None:
    loss, model, scores = run(daifu.transform(fresh(fit)))
    repairs = automatic()
    assert [r["decision"] for r in repairs] == ["Surgery"]
    assert "torch.set_grad_enabled(True)" in repairs[0]["code"]
    fixed_loss, fixed_model, fixed_scores = run(fit_scoped)
    assert (loss, scores) == (fixed_loss, fixed_scores)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), fixed_model.parameters(), strict=True))


def test_the_report_says_tracking_was_off() -> None:
    crash = crash_from(run, fit)
    assert "does not require grad and does not have a grad_fn" in str(crash.exception)
    report = build_report(crash)
    assert report.environment.grad_enabled is False
    torch.set_grad_enabled(True)
    assert build_report(crash).environment.grad_enabled is True


def test_with_tracking_on_the_same_message_gets_no_such_candidate() -> None:
    def step_on_detached(model, x, y):
        loss = F.cross_entropy(model(x).detach(), y)
        for _ in range(2):
            loss.backward()

    torch.manual_seed(4)
    crash = crash_from(step_on_detached, nn.Linear(4, 2), *batches()[0])
    assert "does not require grad and does not have a grad_fn" in str(crash.exception)
    report = build_report(crash)
    assert report.environment.grad_enabled is True
    candidates, _ = generate(report)
    assert not [c for c in candidates if c.family == "grad_mode"]
    torch.set_grad_enabled(False)
    assert [c for c in generate(build_report(crash))[0] if c.family == "grad_mode"]
