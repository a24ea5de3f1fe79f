"""Scores made before an optimizer's step and read after it: made again where they are read, with the new weights.

A critic scores generated and real points (a Wasserstein-style gap of means), its loss steps its optimizer (changing its weights in place),
then the generator's loss reads the critic's scores of the generated points made before that step: its
backward raises torch's own "one of the variables needed for gradient computation has been modified by an
inplace operation". In automatic mode the embedded bot's candidate scores the generated points again where
the generator's loss reads them (`critic(made)`), keeping the graph through the generator: the run ends with
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

pytestmark = pytest.mark.skipif(trial.unavailable() is not None, reason=f"no trials here: {trial.unavailable()}")


def fit_pair(gen, critic, opt_g, opt_c, steps, g_from):
    gaps = []
    for step in range(steps):
        made = gen(torch.randn(12, 3))
        score_made = critic(made)
        gap = score_made.mean() - critic(1.5 * torch.randn(12, 2) - 1.0).mean()
        opt_c.zero_grad()
        gap.backward(retain_graph=True)
        opt_c.step()
        gaps.append(gap.item())
        if step >= g_from:
            pull = -score_made.mean()
            opt_g.zero_grad()
            pull.backward()
            opt_g.step()
    return gaps[-1]


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
    assert "pull = -critic(made).mean()" in repairs[0]["code"]
    namespace: dict[str, Any] = {}
    exec(inspect.getsource(fit_pair).replace("-score_made.mean()", "-critic(made).mean()"),
         fit_pair.__globals__, namespace)
    fixed_loss, fixed_weights = run(namespace["fit_pair"])
    assert loss == fixed_loss
    assert all(torch.equal(p, q) for p, q in zip(weights, fixed_weights, strict=True))
