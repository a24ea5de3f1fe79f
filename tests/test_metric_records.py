"""A quotient by zero in a metric kept as a record of the run (`history.append({"precision": p, ...})`):
guarded to 0, with the measures computed from it, as when the metric is printed; never where the record's
values go into what the run computes."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

from daifu.report.build import build_report
from repairbot.generate import generate
from tests.botfixtures import crash_from


def generated_lines(fn: Callable[..., Any], *args: Any) -> list[list[str]]:
    """The lines each `lookups` candidate changes, from a real crash of `fn(*args)`."""
    found, _ = generate(build_report(crash_from(fn, *args)))
    old = {line.strip() for line in inspect.getsource(fn).splitlines()}
    return [[line.strip() for line in c.code.splitlines() if line.strip() not in old]
            for c in found if c.family == "lookups"]


def record_scores(history, step, tp, fp, fn):
    precision = tp / (tp + fp)
    recall = tp / (tp + fn)
    f1 = 2 * precision * recall / (precision + recall)
    history.append({"step": step, "precision": precision, "recall": recall, "f1": f1})


def weigh_batches(sampler, tp, fp):
    share = tp / (tp + fp)
    sampler.reweigh({"positive": share})


def test_a_metric_recorded_in_a_history_of_records_is_guarded_with_what_is_computed_from_it() -> None:
    lines = generated_lines(record_scores, [{"step": 0, "precision": 0.5, "recall": 0.5, "f1": 0.5}], 1, 0, 0, 3)
    assert ["precision = tp / (tp + fp) if tp + fp else 0.0",
            "f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0"] in lines, lines
    started = generated_lines(record_scores, [], 1, 0, 0, 3)
    assert ["precision = tp / (tp + fp) if tp + fp else 0.0",
            "f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0"] in started, started


def test_a_record_the_function_computes_with_is_not_a_report() -> None:
    """The share goes into a record handed to the program's sampler, which draws the batches by it."""
    class Sampler:
        def reweigh(self, shares: dict[str, float]) -> None:
            self.shares = shares

    assert generated_lines(weigh_batches, Sampler(), 0, 0) == []
