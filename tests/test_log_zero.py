"""An entropy of sharpened probabilities: `p * torch.log(p)` is NaN where `p` underflowed to 0.

The run stops at a finiteness check on the loss, statements after the log. The log family follows
the non-finite loss back to the `log` of a tensor whose live values reach 0 and proposes the log of
the values clamped to the smallest positive number of their dtype. (Automatic mode does not apply it
yet: the resume re-runs the `if` block that makes `p`, and the re-run rule refuses a block that reads a
name it assigns itself, and `torch.finfo`, which it does not know to only compute.) Real crashes from
the installed torch.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from tests.extras import BOT

for _package in (*BOT, "torch"):
    pytest.importorskip(_package)

import torch
import torch.nn as nn
import torch.nn.functional as F

from daifu.report.build import build_report
from repairbot.rules import analyse
from tests.botfixtures import crash_from

pytestmark = pytest.mark.torch


def changed_lines(code: str, fn: Callable[..., Any]) -> list[str]:
    old = {line.strip() for line in inspect.getsource(fn).splitlines()}
    return [line.strip() for line in code.splitlines() if line.strip() and line.strip() not in old]


def sharpen(model, xs, ys, unlabelled, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for step in range(steps):
        supervised = F.cross_entropy(model(xs), ys)
        ent = torch.zeros(())
        if step >= 2:
            p = F.softmax(model(unlabelled) / 0.01, dim=1)
            ent = -(p * torch.log(p)).sum(1).mean()
        loss = supervised + 0.1 * ent
        assert torch.isfinite(loss), f"loss is {loss.item()} at step {step}"
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(round(loss.item(), 4))
    return losses


def data() -> tuple[nn.Module, torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return nn.Linear(4, 3), torch.randn(8, 4), torch.randint(0, 3, (8,)), torch.randn(8, 4) * 10


CLAMPED = "ent = -(p * torch.log(p.clamp_min(torch.finfo(p.dtype).tiny))).sum(1).mean()"


def test_the_log_of_zeros_is_clamped_where_the_entropy_is_made() -> None:
    report = build_report(crash_from(sharpen, *data(), 5))
    first = next(s for s in analyse(report)[1] if s.kind == "surgery")
    assert changed_lines(first.code, sharpen) == [CLAMPED]


def test_a_log_of_values_above_zero_is_left_alone() -> None:
    def scaled(model, xs, steps):
        for _ in range(steps):
            p = F.softmax(model(xs), dim=1)
            value = torch.log(p).sum() * float("inf")
            assert torch.isfinite(value), "not finite"
        return model

    torch.manual_seed(0)
    report = build_report(crash_from(scaled, nn.Linear(4, 3), torch.randn(8, 4), 2))
    assert not any("clamp_min(torch.finfo" in s.code for s in analyse(report)[1])
