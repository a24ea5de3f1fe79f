"""What a repair passes over, counted each time it fires in the real run (`daifu.core.account`), the
budget that stops automatic repairs past it (`daifu.decide.watch`), and a repeated action folded
into one surgery (`daifu.decide.fold`). Real programs, real torch; every count is checked against
what the program's own data says."""

from __future__ import annotations

import inspect
import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pydantic")  # the repair bot's protocol: the budget and the fold are automatic mode's

import torch.nn as nn  # noqa: E402

import daifu  # noqa: E402
from daifu.core import trial  # noqa: E402
from daifu.core.decisions import SkipIteration, Surgery  # noqa: E402
from daifu.state import RUN  # noqa: E402
from repairbot.protocol import Suggestion  # noqa: E402
from tests.botfixtures import ScriptedBot, served_scripted_bot  # noqa: E402
from tests.copies import fresh  # noqa: E402

pytestmark = pytest.mark.torch
needs_trials = pytest.mark.skipif(trial.unavailable() is not None, reason=f"no trials here: {trial.unavailable()}")
"""Automatic mode applies what a trial passed: without trials it applies other repairs."""


@pytest.fixture(autouse=True)
def _trials_of_the_crashed_iteration_only() -> None:
    """These tests are of what the real run counts and budgets; a trial's horizon
    (`tests/test_trial_horizon.py`) would refuse most of their repairs before the run applies them."""
    daifu.configure(trial_iterations=0)


def recorded(workspace: Path) -> list[dict[str, Any]]:
    """Every line of `repairs.jsonl`: the repairs and what they passed over later."""
    path = workspace / "repairs.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def shaped_batches() -> tuple[list[torch.Tensor], list[int]]:
    """Ten batches of 8 rows of 3 features; three of them (6 rows of 4 features) the model cannot take."""
    torch.manual_seed(0)
    batches = [torch.randn(8, 3) for _ in range(10)]
    bad = [2, 5, 7]
    for index in bad:
        batches[index] = torch.randn(6, 4)
    return batches, bad


def project(batches: list[torch.Tensor]) -> int:
    weights = torch.ones(3)
    trained = 0
    for x in batches:
        scores = x @ weights
        trained += len(scores)
    return trained


def test_a_skipped_iteration_is_counted_each_time_it_fires(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    batches, bad = shaped_batches()
    daifu.set_policy(lambda crash: SkipIteration())
    trained = daifu.transform(fresh(project))(batches)
    passed = sum(len(batches[i]) for i in bad)
    assert trained + passed == sum(len(x) for x in batches)  # what the program's own data says
    entries = recorded(tmp_path / "daifu_workspace")
    assert [e["passed_over"]["firing"]["samples"] for e in entries] == [len(batches[i]) for i in bad]
    last = entries[-1]["passed_over"]
    assert (last["samples"], last["steps"], last["plan"], last["unknown_samples"]) == (passed, len(bad), 10, 0)
    assert last["statements"] == 2 * len(bad)  # `scores = ...` and `trained += ...`, each time
    err = capfd.readouterr().err
    assert f"passed over {passed} samples in 3 steps (30% of the plan: 10 iterations)" in err


def nan_batches() -> tuple[list[torch.Tensor], list[int]]:
    """Batches of 4 to 9 rows; three hold a NaN."""
    torch.manual_seed(1)
    batches = [torch.randn(4 + i % 6, 2) for i in range(12)]
    bad = [3, 4, 9]
    for index in bad:
        batches[index][0, 0] = float("nan")
    return batches, bad


def guarded(batches: list[torch.Tensor]) -> int:
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    trained = 0
    for x in batches:
        loss = model(x).pow(2).mean()
        if not torch.isfinite(loss):
            raise FloatingPointError("non-finite loss")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        trained += len(x)
    return trained


def surgery_of(function: Any, old: str, new: str) -> Surgery:
    source = textwrap.dedent(inspect.getsource(function))
    assert old in source
    return Surgery(source.replace(old, new))


def test_a_surgery_that_continues_counts_every_batch_it_passes_over(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    batches, bad = nan_batches()
    daifu.set_policy(lambda crash: surgery_of(guarded, 'raise FloatingPointError("non-finite loss")', "continue"))
    trained = daifu.transform(fresh(guarded))(batches)
    passed = sum(len(batches[i]) for i in bad)
    assert trained == sum(len(x) for x in batches) - passed
    lines = recorded(tmp_path / "daifu_workspace")
    repair, later = lines[0], lines[1:]
    assert repair["decision"] == "Surgery" and len(later) == len(bad)  # one line each time it continued
    assert [event["firing"]["samples"] for event in later] == [len(batches[i]) for i in bad]
    last = later[-1]
    assert (last["samples"], last["steps"], last["plan"], last["optimizer_steps"]) == (passed, 3, 12, 3)
    err = capfd.readouterr().err
    assert f"the `continue` it introduced: passed over {passed} samples in 3 steps (25% of the plan: 12 iterations)" in err


def labelled(batches: list[tuple[torch.Tensor, torch.Tensor]]) -> int:
    model = nn.Linear(2, 3)
    trained = 0
    for x, y in batches:
        loss = nn.functional.cross_entropy(model(x), y)
        trained += len(y)
    return trained


def test_rows_a_changed_statement_drops_are_counted_each_time() -> None:
    torch.manual_seed(2)
    batches = [(torch.randn(8, 2), torch.randint(0, 5, (8,))) for _ in range(6)]
    fix = "keep = y < 3\n        x, y = x[keep], y[keep]\n        loss = nn.functional.cross_entropy(model(x), y)"
    daifu.set_policy(lambda crash: surgery_of(labelled, "loss = nn.functional.cross_entropy(model(x), y)", fix))
    trained = daifu.transform(fresh(labelled))(batches)
    first = next(i for i, (_, y) in enumerate(batches) if (y >= 3).any())  # the batch that crashed
    dropped = [int((y >= 3).sum()) for _, y in batches[first:] if (y >= 3).any()]
    (account,) = RUN.accounts.values()
    assert account.samples == sum(dropped) and account.firings == len(dropped) and account.unknown == 0
    assert trained == sum(len(y) for _, y in batches) - sum(dropped)


def test_what_the_loop_plans_and_what_a_batch_holds_are_read_not_guessed() -> None:
    from daifu.core.account import plan_of, rows

    assert plan_of(iter(range(40))) == 40 and plan_of(enumerate(iter([1, 2, 3]))) == 3
    assert plan_of(zip(iter(range(5)), iter(range(3)))) == 3
    assert plan_of(x for x in range(3)) is None  # a generator does not say: no plan
    loader = torch.utils.data.DataLoader(list(range(10)), batch_size=3)
    assert plan_of(iter(loader)) == 4
    assert rows(torch.zeros(8, 3)) == 8 and rows((torch.zeros(5, 2), torch.zeros(5))) == 5
    assert rows({"ids": torch.zeros(4)}) == 4 and rows(torch.tensor(1.0)) is None and rows(3) is None


# -- the budget in the real run ------------------------------------------------------------------


@pytest.fixture
def bot() -> Iterator[tuple[ScriptedBot, str]]:
    with served_scripted_bot() as served:
        yield served


@needs_trials
def test_an_automatic_skip_past_its_budget_is_refused_and_the_original_exception_goes_on(
    bot: tuple[ScriptedBot, str], capfd: pytest.CaptureFixture[str]
) -> None:
    scripted, url = bot
    scripted.suggestions = [Suggestion(kind="skip_iteration", explanation="a bad batch", confidence=0.5)]
    daifu.configure(mode="automatic", approve="auto", bot_url=url)
    batches, bad = shaped_batches()
    with pytest.raises(RuntimeError, match="size mismatch"):
        daifu.transform(fresh(project))(batches)
    decisions = [entry["decision"] for entry in RUN.history]
    assert decisions == ["SkipIteration", "Raise"]
    err = capfd.readouterr().err
    assert "would pass over more than its budget (the crashed batch's 6 samples, once)" in err
    assert "no more automatic repairs there" in err


@needs_trials
def test_the_budget_is_a_setting(bot: tuple[ScriptedBot, str], monkeypatch: pytest.MonkeyPatch) -> None:
    scripted, url = bot
    scripted.suggestions = [Suggestion(kind="skip_iteration", explanation="a bad batch", confidence=0.5)]
    monkeypatch.setenv("DAIFU_PASS_OVER", "12")  # two of the bad batches' 6 samples, not three
    daifu.configure(mode="automatic", approve="auto", bot_url=url)
    batches, bad = shaped_batches()
    with pytest.raises(RuntimeError):
        daifu.transform(fresh(project))(batches)
    assert [entry["decision"] for entry in RUN.history] == ["SkipIteration", "SkipIteration", "Raise"]


def saturating(x: torch.Tensor, y: torch.Tensor) -> int:
    model = nn.Linear(1, 1); opt = torch.optim.SGD(model.parameters(), lr=2.0); steps = 0  # noqa: E702
    for step in range(40):
        p = torch.sigmoid(model(x)).squeeze(1)
        loss = -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()
        if not torch.isfinite(loss):
            raise FloatingPointError(f"Loss is {loss.item()}, stopping training")
        opt.zero_grad(); loss.backward(); opt.step(); steps += 1  # noqa: E702
    return steps


@needs_trials
def test_a_surgery_that_continues_on_every_batch_is_taken_back_past_its_budget(
    bot: tuple[ScriptedBot, str], capfd: pytest.CaptureFixture[str]
) -> None:
    """Issue 29's saturating BCE: the repair turns the `raise` into `continue`, which passed its
    one-iteration trial and then took 1 optimizer step of 40. Past the crashed batch, once, the
    surgery is taken back: the program's own `raise` runs again, and its exception goes on."""
    scripted, url = bot
    raised = 'raise FloatingPointError(f"Loss is {loss.item()}, stopping training")'
    fix = surgery_of(saturating, raised, "continue")
    scripted.suggestions = [Suggestion(kind="surgery", code=fix.source, explanation="skip", confidence=0.5)]
    daifu.configure(mode="automatic", approve="auto", bot_url=url)
    torch.manual_seed(0)
    x = torch.linspace(-20, 20, 64).unsqueeze(1)
    y = (x[:, 0] > 0).float()
    with pytest.raises(FloatingPointError, match="Loss is nan, stopping training"):
        daifu.transform(fresh(saturating))(x, y)
    err = capfd.readouterr().err
    assert "the `continue` it introduced: passed over an unknown number of samples in 1 step (2.5% of the plan: 40 iterations)" in err
    assert "would pass over more than its budget (the crashed batch, once (its samples cannot be told))" in err
    assert [entry["decision"] for entry in RUN.history] == ["Surgery", "Raise"]


# -- a repeated action, folded -------------------------------------------------------------------


def embed(batches: list[torch.Tensor]) -> float:
    torch.manual_seed(3)
    table = nn.Embedding(10, 3)
    total = 0.0
    for ids in batches:
        vectors = table(ids)
        total += float(vectors.detach().sum())
    return total


@needs_trials
def test_an_action_that_would_repeat_at_each_crash_is_folded_into_one_surgery(
    bot: tuple[ScriptedBot, str], capfd: pytest.CaptureFixture[str]
) -> None:
    scripted, url = bot
    scripted.suggestions = [Suggestion(kind="action", code="ids = ids.clamp(max=9)", explanation="unknown ids",
                                       confidence=0.5)]
    daifu.configure(mode="automatic", approve="auto", bot_url=url)
    torch.manual_seed(4)
    batches = [torch.randint(0, 10, (4,)) for _ in range(12)]
    for index in (2, 5, 8, 10):
        batches[index][1] = 12  # an id the table does not hold
    expected = embed([ids.clamp(max=9) for ids in batches])
    assert daifu.transform(fresh(embed))(batches) == pytest.approx(expected)
    assert [entry["decision"] for entry in RUN.history] == ["Action", "Surgery"]  # not four actions
    err = capfd.readouterr().err
    assert ("the action at test_account.py:" in err
            and "would run again (applied 1 time there already): folded into one surgery" in err)
    assert "except IndexError:" in RUN.history[-1]["code"]


@needs_trials
def test_an_action_that_cannot_be_folded_says_it_repeats(
    bot: tuple[ScriptedBot, str], capfd: pytest.CaptureFixture[str]
) -> None:
    scripted, url = bot
    scripted.suggestions = [Suggestion(kind="action", code="clamped = 1\nids = ids.clamp(max=9)",
                                       explanation="unknown ids", confidence=0.5)]
    daifu.configure(mode="automatic", approve="auto", bot_url=url, pass_over="unlimited")
    batches = [torch.randint(0, 10, (4,)) for _ in range(6)]
    for index in (1, 4):
        batches[index][0] = 11
    daifu.transform(fresh(embed))(batches)
    assert [entry["decision"] for entry in RUN.history] == ["Action", "Action"]
    assert ("applied 1 time there already); it is not folded into one surgery: the action binds clamped, "
            "which the function does not have as locals") in capfd.readouterr().err


# -- `daifu show` -----------------------------------------------------------------------------------


def test_daifu_show_says_what_each_repair_passed_over(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from daifu.cli.main import main

    batches, bad = nan_batches()
    daifu.set_policy(lambda crash: surgery_of(guarded, 'raise FloatingPointError("non-finite loss")', "continue"))
    daifu.transform(fresh(guarded))(batches)
    capsys.readouterr()
    assert main(["show"]) == 0
    table = capsys.readouterr().out
    passed = sum(len(batches[i]) for i in bad)
    assert "passed over" in table.splitlines()[0]
    assert f"passed over {passed} samples in 3 steps (25% of the plan: 12 iterations)" in table


def window(X: torch.Tensor, labels: torch.Tensor, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    return X[i:i + 30], labels[i:i + 30]


def shifted_labels(X: torch.Tensor, labels: torch.Tensor) -> nn.Module:
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        for i in range(0, 300, 30):
            x, y = window(X, labels, i)  # made in a callee: the bot's origin edit (`- 1`) does not reach it
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model


@pytest.mark.slow
@needs_trials
def test_issue_29s_shifted_labels_are_not_dropped_batch_after_batch(capfd: pytest.CaptureFixture[str]) -> None:
    """Labels numbered 1..3 into a 3-class loss: every batch holds the out-of-range label. Whatever the
    offline bot's repair passes over (the rows holding it, or the batch), it would pass it over batch
    after batch: past the crashed batch, once, automatic repairs there stop, and the program's own
    exception goes on."""
    daifu.configure(mode="automatic", approve="auto")
    torch.manual_seed(0)
    X = torch.randn(300, 4)
    labels = X[:, :3].argmax(1) + 1
    with pytest.raises(IndexError, match="Target 3 is out of bounds"):
        daifu.transform(fresh(shifted_labels))(X, labels)
    err = capfd.readouterr().err
    assert "would pass over more than its budget" in err and "no more automatic repairs there" in err
