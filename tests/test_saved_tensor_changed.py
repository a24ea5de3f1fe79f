"""A tensor autograd saved for the backward pass, changed in place afterwards: copied where it is made.

`torch.sigmoid` saves its output for its backward; `scores *= 2.0` then changes that output in place and
`loss.backward()` fails with torch's own "one of the variables needed for gradient computation has been
modified by an inplace operation". The embedded bot proposes `.clone()` where the changed tensor is made:
the in-place change then goes to the copy and the gradient is what the out-of-place program computes. The
run resumes at that statement (the forward pass is made again), and the re-runs only compute.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import daifu
from daifu.core import trial
from tests.copies import fresh
from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

pytestmark = pytest.mark.skipif(trial.unavailable() is not None, reason=f"no trials here: {trial.unavailable()}")


def fit_scaled(model, optimizer, batches):
    for x, y in batches:
        scores = torch.sigmoid(model(x))
        scores *= 2.0
        loss = F.mse_loss(scores, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


def batches() -> list[tuple[Any, Any]]:
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(48, 3, generator=generator)
    y = 2.0 * (x[:, :1] > 0).float()
    return [(x[i : i + 8], y[i : i + 8]) for i in range(0, 48, 8)]


def run(program: Any) -> tuple[float, Any]:
    torch.manual_seed(6)
    model = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    return program(model, optimizer, batches()), model


def test_the_real_message_is_what_the_bot_reads() -> None:
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run(fit_scaled)


def test_a_saved_tensor_changed_in_place_is_copied_where_it_is_made(automatic) -> None:
    loss, model = run(daifu.transform(fresh(fit_scaled)))
    repairs = automatic()
    assert [r["decision"] for r in repairs] == ["Surgery"]
    assert "torch.sigmoid(model(x)).clone()" in repairs[0]["code"]
    namespace: dict[str, Any] = {}
    exec(inspect.getsource(fit_scaled).replace("scores *= 2.0", "scores = scores * 2.0"), fit_scaled.__globals__,
         namespace)
    fixed_loss, fixed_model = run(namespace["fit_scaled"])
    assert loss == pytest.approx(fixed_loss, rel=1e-6)
    assert all(torch.allclose(p, q, atol=1e-7) for p, q in zip(model.parameters(), fixed_model.parameters(),
                                                               strict=True))
