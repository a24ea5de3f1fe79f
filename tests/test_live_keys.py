"""A key the statement computes (a module constant, an attribute, an f-string) that the live mapping
does not hold: the key it does hold is read at every place that asks the same, never a key that names
another measure, and never one that varies within the function."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

import daifu
from daifu.core.trial import unavailable
from daifu.report.build import build_report
from daifu.state import RUN
from repairbot.generate import generate
from tests.botfixtures import crash_from
from tests.copies import fresh

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

pytestmark = [pytest.mark.torch, pytest.mark.skipif(unavailable() is not None, reason=f"no trials: {unavailable()}")]

MONITOR = "val_acc"


class Settings:
    monitor = "val_acc"


SETTINGS = Settings()


def generated_lines(fn: Callable[..., Any], *args: Any) -> list[list[str]]:
    """The lines each `lookups` candidate changes, from a real crash of `fn(*args)`."""
    found, _ = generate(build_report(crash_from(fn, *args)))
    old = {line.strip() for line in inspect.getsource(fn).splitlines()}
    return [[line.strip() for line in c.code.splitlines() if line.strip() not in old]
            for c in found if c.family == "lookups"]


def best_of(metrics, best):
    if metrics[MONITOR] > best:
        best = metrics[MONITOR]
    return best


def best_by_setting(metrics, best):
    if metrics[SETTINGS.monitor] > best:
        best = metrics[SETTINGS.monitor]
    return best


def best_by_parameter(metrics, best, key):
    if metrics[key] > best:
        best = metrics[key]
    return best


def per_split(history, value):
    for split in ("train", "val"):
        history[f"{split}_acc"].append(value)


def test_a_constant_key_is_read_as_the_key_the_mapping_holds_wherever_it_is_asked() -> None:
    """`val_acc` of a dict of `loss` and `accuracy` (an evaluation's own metrics, not qualified by a split):
    `accuracy`, in the `if` and in its body; never `loss`, another measure."""
    lines = generated_lines(best_of, {"loss": 0.4, "accuracy": 0.8}, float("-inf"))
    assert ["if metrics['accuracy'] > best:", "best = metrics['accuracy']"] in lines, lines
    assert not any("loss" in line for found in lines for line in found), lines
    found, _ = generate(build_report(crash_from(best_of, {"loss": 0.4, "accuracy": 0.8}, float("-inf"))))
    assert [(c.kind, c.code) for c in found if c.family == "lookups"][1:] == [("action", "MONITOR = 'accuracy'")]
    by_setting = generated_lines(best_by_setting, {"loss": 0.4, "accuracy": 0.8}, float("-inf"))
    assert ["if metrics['accuracy'] > best:", "best = metrics['accuracy']"] in by_setting, by_setting


def test_a_key_for_another_split_or_a_key_that_varies_is_not_replaced() -> None:
    """Never `train_acc` for `val_acc`; never a key from a loop variable or a parameter (the next call may ask
    for another)."""
    assert generated_lines(best_of, {"loss": 0.4, "train_acc": 0.8}, float("-inf")) == []
    assert generated_lines(best_by_parameter, {"loss": 0.4, "accuracy": 0.8}, float("-inf"), "val_acc") == []
    looked = generated_lines(per_split, {"val_acc": [], "accuracy": []}, 0.5)
    assert not any("accuracy" in line for found in looked for line in found), looked


def track_best(model, optimizer, x, y, steps, saved):
    best = float("-inf")
    for step in range(steps):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        with torch.no_grad():
            metrics = {"loss": F.cross_entropy(model(x), y).item(),
                       "accuracy": (model(x).argmax(1) == y).float().mean().item()}
        if metrics[MONITOR] > best:
            best = metrics[MONITOR]
            saved.append(step)
    return best


def track_best_fixed(model, optimizer, x, y, steps, saved):
    best = float("-inf")
    for step in range(steps):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        with torch.no_grad():
            metrics = {"loss": F.cross_entropy(model(x), y).item(),
                       "accuracy": (model(x).argmax(1) == y).float().mean().item()}
        if metrics["accuracy"] > best:
            best = metrics["accuracy"]
            saved.append(step)
    return best


def classifier() -> tuple[Any, Any]:
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    return model, torch.optim.SGD(model.parameters(), lr=0.2)


def test_the_run_tracks_the_metric_the_evaluation_returns(tmp_path: Path) -> None:
    daifu.configure(mode="automatic", approve="auto", bot_url=None, workspace=tmp_path / "daifu_workspace")
    before = RUN.recorded
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(32, 5, generator=generator)
    y = (x @ torch.randn(5, 3, generator=generator)).argmax(dim=1)
    model, optimizer = classifier()
    saved: list[int] = []
    best = daifu.transform(fresh(track_best))(model, optimizer, x, y, 6, saved)

    repairs = RUN.repairs_since(before)
    assert [(r["exception_type"], r["decision"]) for r in repairs] == [("KeyError", "Surgery")]
    assert "metrics['accuracy']" in repairs[0]["code"] and "MONITOR" not in repairs[0]["code"]
    fixed_model, fixed_optimizer = classifier()
    fixed_saved: list[int] = []
    assert best == track_best_fixed(fixed_model, fixed_optimizer, x, y, 6, fixed_saved)
    assert saved == fixed_saved and saved[0] == 0
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), fixed_model.parameters(), strict=True))
