"""Item ids made as floats (`.floor()` keeps float32) where an embedding looks them up: cast where they are made.

The embedding refuses the dtype ("Expected tensor for argument #1 'indices' to have one of the following
scalar types: Long, Int"). The report names the ids as the wrong operand when they are whole numbers
among the embedding's rows (a cast then changes no id); the origin family follows them back, through an
`if` whose branches both make them, to the statement that made them float, and casts there. Real
crashes from the installed torch.
"""

from __future__ import annotations


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
from tests.surgery_lines import changed_lines

pytestmark = pytest.mark.torch
needs_trials = pytest.mark.skipif(unavailable() is not None, reason=f"no trials: {unavailable()}")


def rank_items(users, items, steps, skew_from):
    opt = torch.optim.SGD([*users.parameters(), *items.parameters()], lr=0.05)
    g = torch.Generator().manual_seed(0)
    skew = torch.rand(steps, 8, generator=g)
    losses = []
    for step in range(steps):
        user = torch.randint(0, 20, (8,), generator=g)
        pos = torch.randint(0, 50, (8,), generator=g)
        if step < skew_from:
            neg = torch.randint(0, 50, (8,), generator=g)
        else:
            neg = (skew[step] * 50).floor()
        u = users(user)
        margin = (u * items(pos)).sum(1) - (u * items(neg)).sum(1)
        loss = -F.logsigmoid(margin).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(round(loss.item(), 5))
    return losses


def rank_items_fixed(users, items, steps, skew_from):
    opt = torch.optim.SGD([*users.parameters(), *items.parameters()], lr=0.05)
    g = torch.Generator().manual_seed(0)
    skew = torch.rand(steps, 8, generator=g)
    losses = []
    for step in range(steps):
        user = torch.randint(0, 20, (8,), generator=g)
        pos = torch.randint(0, 50, (8,), generator=g)
        if step < skew_from:
            neg = torch.randint(0, 50, (8,), generator=g)
        else:
            neg = (skew[step] * 50).floor().long()
        u = users(user)
        margin = (u * items(pos)).sum(1) - (u * items(neg)).sum(1)
        loss = -F.logsigmoid(margin).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(round(loss.item(), 5))
    return losses


def tables() -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    return nn.Embedding(20, 4), nn.Embedding(50, 4)


def test_float_ids_are_named_and_cast_where_the_branch_made_them() -> None:
    report = build_report(crash_from(rank_items, *tables(), 5, 3))
    assert [(o.expression, o.expect) for o in report.operands if o.wrong] == [("neg", {"dtype": "int64"})]
    found = [changed_lines(s.code, rank_items) for s in analyse(report)[1] if s.kind == "surgery"]
    assert ["neg = (skew[step] * 50).floor().long()"] in found


def test_float_ids_with_fractions_are_not_named() -> None:
    def lookup(items, ids):
        return items(ids)

    report = build_report(crash_from(lookup, nn.Embedding(50, 4), torch.tensor([1.5, 2.0])))
    assert not [o for o in report.operands if o.wrong]


@needs_trials
def test_float_ids_recover_with_the_fixed_programs_losses(automatic_embedded) -> None:
    losses = daifu.transform(fresh(rank_items))(*tables(), 6, 3)
    repairs = automatic_embedded()
    assert [r["decision"] for r in repairs] == ["Surgery"]
    assert changed_lines(repairs[0]["code"], rank_items) == ["neg = (skew[step] * 50).floor().long()"]
    assert losses == rank_items_fixed(*tables(), 6, 3)
