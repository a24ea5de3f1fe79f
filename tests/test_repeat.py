"""A crash again at a site whose automatic repair was verified there (`daifu.decide.repeat`): the same repair,
re-verified by a short trial without asking the bot, and only when the crash has the same facts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

import daifu
from daifu.core.crash import Crash
from daifu.decide import repeat
from tests.copies import fresh

torch = pytest.importorskip("torch")
F = torch.nn.functional


class Tracker:
    """An experiment tracker whose connection drops on the calls listed in `drops` (call number: message)."""

    def __init__(self, drops: dict[int, str]) -> None:
        self.drops, self.calls, self.logged = drops, 0, []

    def log(self, step: int, value: float) -> None:
        self.calls += 1
        if self.calls in self.drops:
            raise ConnectionResetError(104, self.drops[self.calls])
        self.logged.append(step)


def train(model, optimizer, x, y, tracker, steps):
    for step in range(steps):
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        tracker.log(step, loss.item())
    return step


def run(tracker: Tracker, steps: int = 8) -> int:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    return daifu.transform(fresh(train))(model, optimizer, x, y, tracker, steps)


def bot_answers(tmp_path: Path) -> list[dict[str, Any]]:
    """The repair bot's answers the run recorded: one per time it was asked."""
    path = tmp_path / "daifu_workspace" / "repairbot_suggestions.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_same_crash_again_is_repaired_by_the_verified_repair_after_a_short_trial(
        automatic, tmp_path, capfd) -> None:
    reset = "Connection reset by peer"
    tracker = Tracker({3: reset, 7: reset})  # steps 2 and 5 lose their first call

    assert run(tracker) == 7
    repairs = automatic()
    said = capfd.readouterr().err

    assert [r["decision"] for r in repairs] == ["Retry", "Retry"]
    assert "repeat_of" not in repairs[0] and repairs[1]["repeat_of"] == repairs[0]["repair"]
    assert repairs[1]["trials"][0]["horizon"] == 0  # the crashed iteration only
    assert "re-verified by a short trial (the crashed iteration only" in said and "the bot was not asked" in said
    assert len(bot_answers(tmp_path)) == 1  # asked at the first crash only
    assert tracker.logged == list(range(8))  # each step logged once: the short trial left the tracker as it was


def test_a_repeat_whose_short_trial_fails_is_not_applied_and_the_full_check_runs(automatic, tmp_path, capfd) -> None:
    # The full check tries two of the bot's answers (a retry, a wait of 0.5 s): its next ones wait 2, 8 and
    # 30 s in their trials, 40 s of the suite's time that tell nothing more of the repeat.
    daifu.configure(max_trials=2)
    reset = "Connection reset by peer"
    # Step 2 loses its first call; from step 9 on, past what the first repair's trial saw, no call goes through.
    tracker = Tracker({3: reset, **{call: reset for call in range(11, 60)}})

    with pytest.raises(ConnectionResetError):
        run(tracker, 12)
    repairs = automatic()
    said = capfd.readouterr().err

    assert repairs[0]["decision"] == "Retry" and all("repeat_of" not in r for r in repairs)
    assert "failed its short trial" in said and "re-verified by a short trial" not in said
    assert len(bot_answers(tmp_path)) == 2  # the full path asked the bot again
    assert tracker.logged == list(range(9))


def test_a_crash_with_another_message_shape_goes_through_the_full_check(automatic, tmp_path, capfd) -> None:
    tracker = Tracker({3: "Connection reset by peer", 7: "Connection timed out after 30 s"})

    assert run(tracker) == 7
    repairs = automatic()
    said = capfd.readouterr().err

    assert [r["decision"] for r in repairs] == ["Retry", "Retry"] and all("repeat_of" not in r for r in repairs)
    assert "again, but its message shape differ" in said
    assert len(bot_answers(tmp_path)) == 2


def crash(statement: str, error: BaseException, **values: Any) -> Crash:
    return Crash(exception=error, function_name="f", qualname="f", source="def f(x, w):\n    y = x @ w\n",
                 filename="f.py", first_lineno=1, lineno=2, statement=statement, kind="statement", locals=values,
                 attempt=1)


def test_the_facts_of_a_crash_hold_its_operands_shapes_and_its_message_without_its_numbers() -> None:
    error = RuntimeError("mat1 and mat2 shapes cannot be multiplied (8x4 and 3x1)")
    first = crash("y = x @ w", error, x=torch.zeros(8, 4), w=torch.zeros(3, 1), y=None)

    same = crash("y = x @ w", RuntimeError("mat1 and mat2 shapes cannot be multiplied (9x4 and 3x1)"),
                 x=torch.zeros(8, 4), w=torch.zeros(3, 1), y=torch.zeros(1))
    wider = crash("y = x @ w", error, x=torch.zeros(8, 5), w=torch.zeros(3, 1))
    other = crash("y = x @ w", ValueError("mat1 and mat2 shapes cannot be multiplied (8x4 and 3x1)"),
                  x=torch.zeros(8, 4), w=torch.zeros(3, 1))

    assert repeat.facts(first) == repeat.facts(same)  # what the statement binds (y) is no operand
    assert dict(repeat.facts(first).operands)["x"] == "Tensor (8, 4) torch.float32"
    assert repeat.facts(first) != repeat.facts(wider)
    assert repeat.facts(first).exception != repeat.facts(other).exception
