"""The once-per-pass allowance for loops over a DataLoader: the last batch of each epoch, too small for a layer.

A DataLoader over data that is no multiple of its batch size ends each epoch with a short batch; one row
is too few for BatchNorm in training mode. Passing it over is the crashed batch again at every epoch's
end, at the same place of a new pass of the loop (a new iterator: the loop re-entered), which the budget
allows (`daifu.core.account.Budget`). The place is told by the iterator: a standard library iterator's
length hint, a DataLoader iterator's length less the batches it has yielded (its hint is its whole
length). Real crashes of the installed torch.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from tests.extras import BOT

for _package in (*BOT, "torch"):
    pytest.importorskip(_package)

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import daifu
from daifu.core.account import Account, Budget, iteration_firing
from daifu.core.trial import unavailable
from tests.copies import fresh

pytestmark = pytest.mark.torch
needs_trials = pytest.mark.skipif(unavailable() is not None, reason=f"no trials: {unavailable()}")

ROWS, BATCH, ROUNDS = 49, 8, 3
"""49 rows in batches of 8: every round over the loader ends with a batch of one."""


def gauges() -> TensorDataset:
    generator = torch.Generator().manual_seed(11)
    x = torch.randn(ROWS, 3, generator=generator)
    return TensorDataset(x, (x[:, 1] - x[:, 2] > 0).long())


def normed() -> nn.Module:
    torch.manual_seed(2)
    return nn.Sequential(nn.Linear(3, 6), nn.BatchNorm1d(6), nn.Tanh(), nn.Linear(6, 2))


def rounds_over_loader(net, data, rounds):
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    fed = 0
    for r in range(rounds):
        for inputs, targets in DataLoader(data, batch_size=BATCH, shuffle=True,
                                          generator=torch.Generator().manual_seed(r)):
            logits = net(inputs)
            loss = F.cross_entropy(logits, targets)
            opt.zero_grad()
            loss.backward()
            opt.step()
            fed += len(targets)
    return fed


def rounds_dropping_last(net, data, rounds):
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    fed = 0
    for r in range(rounds):
        for inputs, targets in DataLoader(data, batch_size=BATCH, shuffle=True, drop_last=True,
                                          generator=torch.Generator().manual_seed(r)):
            logits = net(inputs)
            loss = F.cross_entropy(logits, targets)
            opt.zero_grad()
            loss.backward()
            opt.step()
            fed += len(targets)
    return fed


LOOP = ast.parse("def f(loader):\n    for batch in loader:\n        use(batch)\n        opt.step()\n").body[0]
assert isinstance(LOOP, ast.FunctionDef)
SAMPLING = ast.parse("def f(loader):\n    for batch in loader:\n        log(draw(batch))\n").body[0]
assert isinstance(SAMPLING, ast.FunctionDef)


def firing_at_end_of(loader: DataLoader, drawn: int, loop: ast.FunctionDef = LOOP) -> Any:
    """The firing of a skipped iteration after `drawn` batches of a new pass over `loader`."""
    iterator = iter(loader)
    for _ in range(drawn):
        batch = next(iterator)
    return iteration_firing("skip-iteration", loop, (0, "body", 0), {"@it0": iterator, "batch": batch})


def test_the_last_batch_of_each_pass_over_a_dataloader_is_the_same_place_of_a_new_pass() -> None:
    loader = DataLoader(gauges(), batch_size=BATCH)
    passes = len(loader)
    budget = Budget(1, 1, "the crashed batch's 1 samples, once")
    account = Account(("f", "train.py", 3), "train.py:3")
    first = firing_at_end_of(loader, passes)
    assert first.remaining == 0 and first.samples == 1
    account.add(first)
    assert not budget.exceeded_by(account, firing_at_end_of(loader, passes))  # the next epoch's last batch
    assert budget.exceeded_by(account, firing_at_end_of(loader, 2))  # another batch of a new pass
    assert budget.exceeded_by(account, first)  # the same pass again


def test_the_same_place_of_a_new_pass_that_trains_nothing_counts_against_the_budget() -> None:
    loader = DataLoader(gauges(), batch_size=BATCH)
    passes = len(loader)
    budget = Budget(1, 1, "the crashed batch's 1 samples, once")
    account = Account(("f", "train.py", 3), "train.py:3")
    account.add(firing_at_end_of(loader, passes, SAMPLING))
    assert budget.exceeded_by(account, firing_at_end_of(loader, passes, SAMPLING))  # the same output lost again


@needs_trials
def test_automatic_mode_passes_over_the_one_row_batch_of_every_round_over_a_dataloader(
        workspace: Path, capfd: pytest.CaptureFixture[str]) -> None:
    net, by_hand = normed(), normed()
    fed = daifu.transform(fresh(rounds_over_loader))(net, gauges(), ROUNDS)
    assert fed == rounds_dropping_last(by_hand, gauges(), ROUNDS) == ROUNDS * (ROWS - 1)
    assert all(torch.equal(a, b) for a, b in zip(net.parameters(), by_hand.parameters()))
    said = capfd.readouterr().err
    assert "budget" not in said, said
    path = workspace / "repairs.jsonl"
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    assert [e for e in entries if "decision" in e], entries
