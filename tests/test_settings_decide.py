"""An action rebinding a module-level setting that decides whether the program writes a file needs a
person, as a surgery changing that condition does (`allowlist._settings_deciding_effects`).

`keep_best` saves the model when the monitored measure improves; the monitored name is a module
constant that the evaluation's dict does not hold. Setting the constant to a key the dict holds
decides which model is kept — `MONITOR = 'loss'` keeps the worst — so no value of it is admitted
unattended; a setting that only scales a computed value, and a rebound local, stay admitted.
"""

from __future__ import annotations

import dataclasses
import traceback
from pathlib import Path
from typing import Any

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

torch = pytest.importorskip("torch")

from daifu.core.crash import Crash
from daifu.decide.allowlist import check_safety, context_for
from tests.botfixtures import crash_from

MONITOR = "val_acc"
SCALE = 2.0


def keep_best(model: Any, metrics: dict[str, float], best: float, path: str) -> float:
    score = metrics[MONITOR]
    if score > best:
        best = score
        torch.save(model.state_dict(), path)
    return best * SCALE


def live_crash(tmp_path: Path) -> Crash:
    crash = crash_from(keep_best, torch.nn.Linear(2, 2), {"accuracy": 0.8, "loss": 0.4}, 0.0, str(tmp_path / "b.pt"))
    frame = next(f for f, _ in traceback.walk_tb(crash.exception.__traceback__) if f.f_code is keep_best.__code__)
    return dataclasses.replace(crash, frame=frame)


@pytest.mark.parametrize("code", ["MONITOR = 'loss'", "MONITOR = 'accuracy'", "MONITOR, other = 'loss', 1"])
def test_rebinding_the_setting_that_decides_a_save_needs_a_person(code: str, tmp_path: Path) -> None:
    reasons = check_safety(code, context_for(live_crash(tmp_path))).reasons
    assert any("torch.save" in reason and "module-level name" in reason for reason in reasons), reasons


def test_a_setting_that_only_scales_a_value_and_a_rebound_local_are_admitted(tmp_path: Path) -> None:
    context = context_for(live_crash(tmp_path))
    assert check_safety("metrics = {'val_acc': metrics['accuracy'], **metrics}", context).ok
    assert not any("module-level name" in reason for reason in check_safety("SCALE = 1.0", context).reasons)
