"""Backward through a graph a second time: a carried state detached, unless that stops training a branch.

Two loops whose second backward goes through the graph the first one freed (torch's own "Trying to
backward through the graph a second time"), each repaired in automatic mode by the embedded bot, whose
candidate detaches the carried value where the iteration first reads it:

- a running mean of the features, used as the target of the next batches and updated after the step
  without `.detach()`: detached, every layer still trains, and the run ends as the program that
  detaches it from the start;
- features an encoder computes once, on the first pass, for a probe trained on them (`if cached is None:
  cached = encoder(x)`): detaching them where the pass first reads them would run that `if` again, which
  the re-run rule refuses; detached where the loss reads them, below it, the probe trains as in the program
  that detaches them from the start;
- a context vector a layer computes once and the loop carries: detaching it stops that layer's
  training for good; the trial sees that no step changes the layer's parameters while others do, the
  repair is refused with that reason, and the crash goes on as without DaiFu.
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


class Cell(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp, self.rec, self.out, self.ctx = nn.Linear(3, 6), nn.Linear(6, 6), nn.Linear(6, 2), nn.Linear(3, 6)


def fit_centred(model, optimizer, batches):
    centre = torch.zeros(6)
    for x, y in batches:
        feats = torch.tanh(model.inp(x))
        loss = F.cross_entropy(model.out(feats), y) + 0.1 * ((feats - centre) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        centre = 0.9 * centre + 0.1 * feats.mean(0)
    return loss.item()


def fit_context(model, optimizer, batches):
    context = torch.zeros(1, 6)
    for step, (x, y) in enumerate(batches):
        if step == 2:
            context = model.ctx(x.mean(0, keepdim=True))
        scores = model.out(torch.tanh(model.inp(x) + context))
        loss = F.cross_entropy(scores, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


def fit_probe(model, optimizer, batches):
    cached = None
    x_all = torch.cat([x for x, _ in batches])
    y_all = torch.cat([y for _, y in batches])
    for step in range(len(batches)):
        if cached is None:
            cached = torch.tanh(model.inp(x_all))
        rows = torch.arange(step * 8, step * 8 + 8)
        loss = F.cross_entropy(model.out(cached[rows]), y_all[rows])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


def batches() -> list[tuple[Any, Any]]:
    generator = torch.Generator().manual_seed(8)
    x = torch.randn(96, 3, generator=generator)
    y = (x[:, 0] * x[:, 1] > 0).long()
    return [(x[i : i + 8], y[i : i + 8]) for i in range(0, 96, 8)]


def run(program: Any) -> tuple[float, Any]:
    torch.manual_seed(9)
    model = Cell()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    return program(model, optimizer, batches()), model


def test_a_carried_running_mean_is_detached_and_every_layer_still_trains(automatic) -> None:
    loss, model = run(daifu.transform(fresh(fit_centred)))
    repairs = automatic()
    assert [r["decision"] for r in repairs] == ["Surgery"]
    assert "centre = centre.detach()" in repairs[0]["code"]
    namespace: dict[str, Any] = {}
    anchor = "        feats = torch.tanh("
    exec(inspect.getsource(fit_centred).replace(anchor, "        centre = centre.detach()\n" + anchor),
         fit_centred.__globals__, namespace)
    fixed_loss, fixed_model = run(namespace["fit_centred"])
    assert loss == fixed_loss
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), fixed_model.parameters(), strict=True))


def test_features_cached_on_the_first_pass_are_detached_where_the_loss_reads_them(automatic) -> None:
    def run_probe(program: Any) -> tuple[float, Any]:
        torch.manual_seed(9)
        model = Cell()
        optimizer = torch.optim.Adam(model.out.parameters(), lr=0.01)
        return program(model, optimizer, batches()), model

    loss, model = run_probe(daifu.transform(fresh(fit_probe)))
    repairs = automatic()
    assert [r["decision"] for r in repairs] == ["Surgery"]
    assert "model.out(cached.detach()[rows])" in repairs[0]["code"]
    namespace: dict[str, Any] = {}
    exec(inspect.getsource(fit_probe).replace("model.out(cached[rows])", "model.out(cached.detach()[rows])"),
         fit_probe.__globals__, namespace)
    fixed_loss, fixed_model = run_probe(namespace["fit_probe"])
    assert loss == fixed_loss
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), fixed_model.parameters(), strict=True))


def test_a_detach_that_stops_a_layer_training_is_refused(automatic, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        run(daifu.transform(fresh(fit_context)))
    assert [r["decision"] for r in automatic()] == ["Raise"]
    line = next(line for line in capsys.readouterr().err.splitlines() if "context = context.detach()" in line)
    assert "refused: it stops" in line, line
