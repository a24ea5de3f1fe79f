"""An index drawn by Python's `random.randint`, whose upper bound is inclusive, one past the end.

Real crashes ("list index out of range"); the candidate lowers the bound by one, and only where the
bound is the length of the sequence the draw indexes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.extras import BOT

for _package in (*BOT, "torch"):
    pytest.importorskip(_package)

import torch
import torch.nn as nn
import torch.nn.functional as F

import daifu
from daifu.core.trial import unavailable
from daifu.report.build import build_report
from repairbot.rules import analyse
from tests.botfixtures import crash_from
from tests.copies import fresh

pytestmark = pytest.mark.torch
needs_trials = pytest.mark.skipif(unavailable() is not None, reason=f"no trials: {unavailable()}")


def prompts() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(6)
    return [torch.randn(4, generator=generator) for _ in range(9)]


def tune(net, bank, rounds, seed):
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    picker = random.Random(seed)
    drawn = []
    for _ in range(rounds):
        choice = picker.randint(0, len(bank))
        anchor = bank[choice]
        loss = F.mse_loss(net(anchor), anchor.flip(0))
        opt.zero_grad()
        loss.backward()
        opt.step()
        drawn.append(choice)
    return drawn


def tune_drawing_positions(net, bank, rounds, seed):
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    picker = random.Random(seed)
    drawn = []
    for _ in range(rounds):
        choice = picker.randint(0, len(bank) - 1)
        anchor = bank[choice]
        loss = F.mse_loss(net(anchor), anchor.flip(0))
        opt.zero_grad()
        loss.backward()
        opt.step()
        drawn.append(choice)
    return drawn


def mix(net, bank, rounds, seed):
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    for r in range(rounds):
        anchor = bank[random.Random(seed + r).randint(0, len(bank))]
        loss = F.mse_loss(net(anchor), anchor.flip(0))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return net


def mix_past_a_window(net, bank, rounds, seed, window):
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    for r in range(rounds):
        anchor = bank[random.Random(seed + r).randint(0, window)]
        loss = F.mse_loss(net(anchor), anchor.flip(0))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return net


def net() -> nn.Module:
    torch.manual_seed(3)
    return nn.Linear(4, 4)


def test_a_draw_made_in_the_statement_is_bounded_by_the_last_position() -> None:
    suggestions = analyse(build_report(crash_from(mix, net(), prompts(), 200, 0)))[1]
    best = next(s for s in suggestions if s.kind == "surgery")
    assert "        anchor = bank[random.Random(seed + r).randint(0, len(bank) - 1)]\n" in best.code, best.code


def test_a_bound_that_is_not_the_length_of_what_it_indexes_is_left_alone() -> None:
    suggestions = analyse(build_report(crash_from(mix_past_a_window, net(), prompts(), 200, 0, 12)))[1]
    assert all("randint(0, window - 1)" not in (s.code or "") for s in suggestions)


@needs_trials
def test_automatic_mode_bounds_the_draw_of_a_local_generator_where_it_is_drawn(workspace: Path) -> None:
    """The draw is one statement above the crash: the candidate edits it there, and resuming draws again
    from the generator's state as the crashed statement left it — the hand-fixed run draws the same."""
    model = net()
    drawn = daifu.transform(fresh(tune))(model, prompts(), 60, 1)
    assert max(drawn) == len(prompts()) - 1 and len(drawn) == 60
    path = workspace / "repairs.jsonl"
    [repair] = [entry for line in path.read_text().splitlines() if "decision" in (entry := json.loads(line))]
    assert repair["decision"] == "Surgery" and "picker.randint(0, len(bank) - 1)" in repair["code"]
