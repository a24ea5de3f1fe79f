"""A program that grows its model while it trains: new parameters are not discarded trained state.

Some programs add to the model on purpose at a chosen step: a layer inserted (progressive growing, a
bottleneck stage), its parameters handed to the optimizer with `add_param_group`. A trial's health check
refused any repair whose run went on to do that, as if the trained state had been thrown away: the model
and the optimizer held parameter tensors they had not held before. Only a trained tensor no longer held
is discarded; one added beside the trained ones is the program's own growth.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import daifu
from daifu.core import health, trial
from tests.copies import fresh
from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

pytestmark = pytest.mark.skipif(trial.unavailable() is not None, reason=f"no trials here: {trial.unavailable()}")


def test_parameters_added_are_kept_state_and_parameters_replaced_are_discarded() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = health.inventory({"model": model, "optimizer": optimizer})
    extra = nn.Linear(6, 6)
    model.insert(1, extra)
    optimizer.add_param_group({"params": list(extra.parameters())})
    assert health.examine(before, {"model": model, "optimizer": optimizer}).discarded == []
    model[0] = nn.Linear(4, 6)
    assert health.examine(before, {"model": model, "optimizer": optimizer}).discarded == [
        "the parameters of `model` replaced (new tensors)"]


def grow(model, optimizer, batches):
    for step, (x, y) in enumerate(batches):
        if step == 3:
            width = model[0].out_features / 2
            extra = nn.Sequential(nn.Linear(model[0].out_features, width), nn.Tanh(),
                                  nn.Linear(width, model[0].out_features))
            optimizer.add_param_group({"params": list(extra.parameters())})
            model.insert(1, extra)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


def batches() -> list[tuple[Any, Any]]:
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(96, 4, generator=generator)
    y = (x[:, 0] + x[:, 1] > 0).long() + (x[:, 2] > 1).long()
    return [(x[i : i + 8], y[i : i + 8]) for i in range(0, 96, 8)]


def run(program: Callable[..., Any]) -> tuple[float, Any]:
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return program(model, optimizer, batches()), model


def test_a_layer_added_mid_run_with_a_float_width_is_repaired_where_the_width_is_made(automatic) -> None:
    """`nn.Linear(8, width)` with `width = 8 / 2` fails; the embedded bot's `//` where the width is
    computed resumes there, the layer is built, handed to the optimizer and trained: the run ends as the
    fixed program's, parameter for parameter."""
    loss, model = run(daifu.transform(fresh(grow)))
    assert [r["decision"] for r in automatic()] == ["Surgery"]
    namespace: dict[str, Any] = {}
    import inspect

    exec(inspect.getsource(grow).replace("out_features / 2", "out_features // 2"), grow.__globals__, namespace)
    fixed_loss, fixed_model = run(namespace["grow"])
    assert loss == fixed_loss
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), fixed_model.parameters(), strict=True))
