"""0/0 in a metric: the quotient guarded to 0 where it only measures the run, never where it is trained on.

Precision with nothing flagged and F1 with precision and recall both 0 raise ZeroDivisionError.
Metric libraries define those ratios as 0; DaiFu proposes the same guard where the quotient goes
nowhere but into reports, comparisons that pick the best weights, and other measures computed from
it (precision into F1). A quotient that feeds a learning rate or a loss is not guarded: 0 there would
change what is trained. Real crashes from the installed Python and torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.extras import BOT

for _package in (*BOT, "torch"):
    pytest.importorskip(_package)

import torch

import daifu
from daifu.core.trial import unavailable
from daifu.report.build import build_report
from repairbot.rules import analyse
from tests.botfixtures import crash_from
from tests.copies import fresh
from tests.surgery_lines import changed_lines

pytestmark = pytest.mark.torch
needs_trials = pytest.mark.skipif(unavailable() is not None, reason=f"no trials: {unavailable()}")


def surgeries(fn: Callable[..., Any], *args: Any) -> list[list[str]]:
    report = build_report(crash_from(fn, *args))
    return [changed_lines(s.code, fn) for s in analyse(report)[1] if s.kind == "surgery"]


def detect(model, features, events, rounds, thresholds):
    scores, best_f1, best_round = [], -1.0, -1
    for round_ in range(rounds):
        with torch.no_grad():
            flagged = model(features).squeeze(1) > thresholds[round_]
        tp = int((flagged & events).sum())
        fp = int((flagged & ~events).sum())
        fn = int((~flagged & events).sum())
        precision = tp / (tp + fp)
        recall = tp / (tp + fn)
        f1 = 2 * precision * recall / (precision + recall)
        scores.append(round(f1, 4))
        if f1 > best_f1:
            best_f1, best_round = f1, round_
    return scores, best_round


def detect_fixed(model, features, events, rounds, thresholds):
    scores, best_f1, best_round = [], -1.0, -1
    for round_ in range(rounds):
        with torch.no_grad():
            flagged = model(features).squeeze(1) > thresholds[round_]
        tp = int((flagged & events).sum())
        fp = int((flagged & ~events).sum())
        fn = int((~flagged & events).sum())
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn)
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        scores.append(round(f1, 4))
        if f1 > best_f1:
            best_f1, best_round = f1, round_
    return scores, best_round


def detector() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor, float]:
    """A scorer, its rows, the events (its 5 highest-scored rows) and a threshold that flags just those."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    features = torch.randn(40, 3)
    with torch.no_grad():
        scores = model(features).squeeze(1)
    fifth = float(scores.topk(5).values[-1])
    return model, features, scores >= fifth, fifth - 1e-4


def test_precision_over_nothing_flagged_is_guarded_to_zero() -> None:
    model, features, events, _ = detector()
    found = surgeries(detect, model, features, events, 3, [100.0, -100.0, 0.0])
    # F1 is computed from the guarded precision and divides by `precision + recall`, 0 in turn: guarded with it
    assert ["precision = tp / (tp + fp) if tp + fp else 0.0",
            "f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0"] in found


def test_f1_with_no_true_positive_is_guarded_to_zero() -> None:
    model, features, events, cut = detector()
    found = surgeries(detect, model, features, ~events, 3, [cut, -100.0, 0.0])  # flags only the non-events
    assert ["f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0"] in found


def detect_f1_guarded(model, features, events, rounds, thresholds):
    scores, best_f1, best_round = [], -1.0, -1
    for round_ in range(rounds):
        with torch.no_grad():
            flagged = model(features).squeeze(1) > thresholds[round_]
        tp = int((flagged & events).sum())
        fp = int((flagged & ~events).sum())
        fn = int((~flagged & events).sum())
        precision = tp / (tp + fp)
        recall = tp / (tp + fn)
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        scores.append(round(f1, 4))
        if f1 > best_f1:
            best_f1, best_round = f1, round_
    return scores, best_round


def test_a_quotient_read_by_a_guard_is_guarded_and_the_guard_is_kept() -> None:
    model, features, events, _ = detector()
    found = surgeries(detect_f1_guarded, model, features, events, 3, [100.0, -100.0, 0.0])
    assert ["precision = tp / (tp + fp) if tp + fp else 0.0"] in found


@needs_trials
def test_a_metric_over_nothing_recovers_as_the_fixed_program(automatic_embedded) -> None:
    model, features, events, cut = detector()
    args = (model, features, events, 4, [100.0, -100.0, cut, 100.0])
    got = daifu.transform(fresh(detect))(*args)
    # the precision over nothing flagged, and F1 of precision and recall both 0, in one surgery
    assert [r["decision"] for r in automatic_embedded()] == ["Surgery"]
    assert got == detect_fixed(*args)
    assert got[1] == 2  # the round whose threshold flags exactly the events is the best, as in the fixed run


def warm_up(model, batches, base_lr, warmup_rounds):
    opt = torch.optim.SGD(model.parameters(), lr=base_lr)
    for step, (x, y) in enumerate(batches):
        scale = min(step, warmup_rounds) / warmup_rounds
        for group in opt.param_groups:
            group["lr"] = base_lr * scale
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


def test_a_quotient_that_sets_the_learning_rate_is_not_guarded() -> None:
    torch.manual_seed(0)
    batches = [(torch.randn(4, 2), torch.randn(4, 1)) for _ in range(3)]
    report = build_report(crash_from(warm_up, torch.nn.Linear(2, 1), batches, 0.1, 0))
    assert report.lookups and report.lookups[0].kind == "divisor"
    assert not any(" if warmup_rounds else " in s.code for s in analyse(report)[1])
