"""A count computed with `/`: rounded up where floor would lose a remainder's items.

`range(len(rows) / batch)` crashes on the float. `//` and `int(...)` stop the crash, but where the
division leaves a remainder they drop it: the last, partial batch is never reached, silently, on
every pass. The live value says whether there is a remainder (a float with a fraction); then the
count rounded up (`-(-a // b)`) ranks first and floor is labelled as what it gives up. Where the
division is exact, `//` stays the simple first repair. Real crashes from the installed Python and torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.extras import BOT

for _package in (*BOT, "torch"):
    pytest.importorskip(_package)

import torch
import torch.nn as nn

import daifu
from daifu.core.trial import unavailable
from daifu.report.build import build_report
from repairbot.protocol import Suggestion
from repairbot.rules import analyse
from tests.botfixtures import crash_from
from tests.copies import fresh
from tests.surgery_lines import changed_lines

pytestmark = pytest.mark.torch

needs_trials = pytest.mark.skipif(unavailable() is not None, reason=f"no trials: {unavailable()}")


def surgeries(suggestions: list[Suggestion], fn: Callable[..., Any]) -> list[list[str]]:
    return [changed_lines(s.code, fn) for s in suggestions if s.kind in ("surgery", "patch_function")]


def fit_and_validate(model, features, labels, steps, eval_batch):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rows_validated = []
    for step in range(steps):
        loss = nn.functional.cross_entropy(model(features[:32]), labels[:32])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 3 == 2:
            n_batches = len(features) / eval_batch
            seen = 0
            with torch.no_grad():
                for i in range(n_batches):
                    batch = features[i * eval_batch:(i + 1) * eval_batch]
                    seen += len(batch)
            rows_validated.append(seen)
    return rows_validated


def data(rows: int) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    return nn.Linear(4, 3), torch.randn(rows, 4, generator=generator), torch.randint(0, 3, (rows,), generator=generator)


def test_a_count_with_a_remainder_is_rounded_up_first() -> None:
    report = build_report(crash_from(fit_and_validate, *data(100), 6, 32))
    found = surgeries(analyse(report)[1], fit_and_validate)
    assert found[0] == ["n_batches = -(-len(features) // eval_batch)"]
    assert ["n_batches = len(features) // eval_batch"] in found[1:]


def test_rounding_down_a_remainder_says_what_it_gives_up() -> None:
    report = build_report(crash_from(fit_and_validate, *data(100), 6, 32))
    floors = [s for s in analyse(report)[1] if s.kind == "surgery"
              and changed_lines(s.code, fit_and_validate) in (["n_batches = len(features) // eval_batch"],
                                                              ["n_batches = int(len(features) / eval_batch)"])]
    assert floors and all("rounds the count down" in s.explanation for s in floors)


def test_an_exact_count_is_floored_first() -> None:
    report = build_report(crash_from(fit_and_validate, *data(96), 6, 32))
    suggestions = analyse(report)[1]
    assert surgeries(suggestions, fit_and_validate)[0] == ["n_batches = len(features) // eval_batch"]
    assert not any("rounds the count down" in s.explanation for s in suggestions)


@needs_trials
def test_a_count_with_a_remainder_recovers_with_every_row_validated(automatic_embedded) -> None:
    rows_validated = daifu.transform(fresh(fit_and_validate))(*data(100), 6, 32)
    repairs = automatic_embedded()
    assert [r["decision"] for r in repairs] == ["Surgery"]
    assert changed_lines(repairs[0]["code"], fit_and_validate) == ["n_batches = -(-len(features) // eval_batch)"]
    assert rows_validated == [100, 100]
