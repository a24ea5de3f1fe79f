"""Scores made before an optimizer's step and read after it: made again where they are read, with the new weights.

A critic scores real and generated points, its loss steps its optimizer (changing its weights in place),
then the generator's loss reads the critic's scores of the generated points made before that step: its
backward raises torch's own "one of the variables needed for gradient computation has been modified by an
inplace operation". In automatic mode the embedded bot's candidate scores the generated points again where
the generator's loss reads them (`critic(fake)`), keeping the graph through the generator: the run ends with
the weights of the program written that way from the start.
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


def fit_pair(gen, critic, opt_g, opt_c, steps, g_from):
    ones, zeros = torch.ones(16, 1), torch.zeros(16, 1)
    for step in range(steps):
        real = 2.0 + torch.randn(16, 2)
        fake = gen(torch.randn(16, 3))
        s_real, s_fake = critic(real), critic(fake)
        loss_c = F.binary_cross_entropy_with_logits(s_real, ones) + F.binary_cross_entropy_with_logits(s_fake, zeros)
        opt_c.zero_grad()
        loss_c.backward(retain_graph=True)
        opt_c.step()
        if step >= g_from:
            loss_g = F.binary_cross_entropy_with_logits(s_fake, ones)
            opt_g.zero_grad()
            loss_g.backward()
            opt_g.step()
    return loss_g.item()


def run(program: Any) -> tuple[float, list[Any]]:
    torch.manual_seed(0)
    gen = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2))
    critic = nn.Sequential(nn.Linear(2, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
    opt_g, opt_c = torch.optim.Adam(gen.parameters(), lr=1e-2), torch.optim.Adam(critic.parameters(), lr=1e-2)
    return program(gen, critic, opt_g, opt_c, 10, 3), [*gen.parameters(), *critic.parameters()]


def test_scores_made_before_the_step_are_made_again_where_the_generator_reads_them(automatic) -> None:
    loss, weights = run(daifu.transform(fresh(fit_pair)))
    repairs = automatic()
    assert [r["decision"] for r in repairs] == ["Surgery"]
    assert "binary_cross_entropy_with_logits(critic(fake), ones)" in repairs[0]["code"]
    namespace: dict[str, Any] = {}
    exec(inspect.getsource(fit_pair).replace("with_logits(s_fake, ones)", "with_logits(critic(fake), ones)"),
         fit_pair.__globals__, namespace)
    fixed_loss, fixed_weights = run(namespace["fit_pair"])
    assert loss == fixed_loss
    assert all(torch.equal(p, q) for p, q in zip(weights, fixed_weights, strict=True))
