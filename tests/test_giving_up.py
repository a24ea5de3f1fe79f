"""Candidates ranked by what they give up (`repairbot.giving_up`, `daifu.decide.giving_up`), on real crashes.

A candidate that changes a value goes before one that passes over work, and among those the smaller
give-up first: the skip of a statement that only reports, then rows of a batch, then an iteration. The
generator ranks so; the training process ranks whatever a bot answered so too (a language model orders
by its confidence), and where a trial measures that a repair gave up work, it looks on for one that
gives up less.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.extras import BOT

for _package in (*BOT, "torch"):
    pytest.importorskip(_package)

import daifu
import daifu.decide.automatic as automatic_mode
from daifu.config import settings
from daifu.core.trial import unavailable
from daifu.decide.botclient import BotAnswer
from daifu.decide.candidates import candidates, rank
from daifu.decide.verify import Verification
from daifu.report.build import build_report
from repairbot.generate import generate
from repairbot.generate.candidate import INTRODUCES_JUMP, SKIPS_ITERATION, SKIPS_REPORT, GeneratedRepair
from repairbot.generate.rank import from_rules, ranked
from repairbot.protocol import Suggestion
from tests.botfixtures import crash_from
from tests.copies import fresh

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch
needs_trials = pytest.mark.skipif(unavailable() is not None, reason=f"no trials: {unavailable()}")


def train_step(model, optimizer, crit, batches):
    steps = 0
    for xb, y in batches:
        out = model(xb)
        loss = crit(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps += 1
    return steps


def float_labels() -> tuple[Any, Any, Any, list[tuple[Any, Any]]]:
    torch.manual_seed(0)
    model = nn.Linear(6, 3)
    batches = [(torch.randn(8, 6), torch.randint(0, 3, (8,)).float()) for _ in range(4)]
    return model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(), batches


def surgery(fn: Callable[..., Any], old: str, new: str) -> str:
    """The source of `fn` with the line `old` (stripped) replaced by the lines `new`, at its indentation."""
    import inspect

    lines = inspect.getsource(fn).split("\n")
    index = next(i for i, line in enumerate(lines) if line.strip() == old)
    indent = lines[index][: len(lines[index]) - len(lines[index].lstrip())]
    return "\n".join(lines[:index] + [indent + line for line in new.split("\n")] + lines[index + 1:])


VALUE = "loss = crit(out, y.long())"
JUMP = "if y.dtype != torch.long:\n    continue\nloss = crit(out, y)"
ROWS = "keep = y >= 0\nout, y = out[keep], y[keep].long()"


# -- the generator's ranking --------------------------------------------------------------------------


def test_the_generator_ranks_a_report_skipped_before_rows_dropped_before_an_iteration() -> None:
    report_skip = GeneratedRepair("skip", "only reports", "site_control", 1, gives_up=SKIPS_REPORT)
    rows = GeneratedRepair("action", "keep the rows with a label", "rules", 2, code=ROWS)  # unlabelled: its code says
    iteration = GeneratedRepair("skip_iteration", "pass the batch over", "control", 2, gives_up=SKIPS_ITERATION)
    kept = ranked([iteration, rows, report_skip], [])
    assert [c.explanation for c in kept] == ["only reports", "keep the rows with a label", "pass the batch over"]
    assert "leaves rows of a batch out" in kept[1].gives_up


def test_the_generator_ranks_a_rules_edit_that_introduces_a_continue_after_a_value_edit() -> None:
    model, optimizer, crit, batches = float_labels()
    crash = crash_from(train_step, model, optimizer, crit, batches)
    _, places = generate(build_report(crash))
    jump = from_rules(Suggestion(kind="surgery", code=surgery(train_step, "loss = crit(out, y)", JUMP),
                                 explanation="pass over batches with float labels", confidence=0.95))
    value = from_rules(Suggestion(kind="surgery", code=surgery(train_step, "loss = crit(out, y)", VALUE),
                                  explanation="labels as class indices", confidence=0.6))
    kept = ranked([jump, value], places)
    assert [c.explanation for c in kept] == ["labels as class indices", "pass over batches with float labels"]
    assert kept[1].gives_up == INTRODUCES_JUMP and "Last resort" in kept[1].suggestion().explanation


# -- the client's ranking of whatever the bot answered --------------------------------------------------


def test_the_client_tries_a_value_edit_before_rows_before_a_jump_whatever_the_bots_confidence() -> None:
    model, optimizer, crit, batches = float_labels()
    crash = crash_from(train_step, model, optimizer, crit, batches)
    answered = [  # a language model's order: by its confidence
        Suggestion(kind="skip_iteration", explanation="skip", confidence=0.95),
        Suggestion(kind="surgery", code=surgery(train_step, "loss = crit(out, y)", JUMP), explanation="jump",
                   confidence=0.9),
        Suggestion(kind="action", code=ROWS, explanation="rows", confidence=0.8),
        Suggestion(kind="surgery", code=surgery(train_step, "loss = crit(out, y)", VALUE), explanation="value",
                   confidence=0.5),
    ]
    found = rank(candidates(Verification(crash, settings()), answered))
    assert [c.explanation for c in found] == ["value", "rows", "skip", "jump"]


def report_accuracy(model, batches):
    for x, y in batches:
        accuracy = (model(x).argmax(1) == y).float()
        print("accuracy", accuracy.item())
    return accuracy


def test_the_client_tries_the_skip_of_a_print_before_the_skip_of_the_iteration() -> None:
    torch.manual_seed(0)
    batches = [(torch.randn(8, 6), torch.randint(0, 3, (8,)))]
    with pytest.raises(RuntimeError, match="cannot be converted to Scalar"):
        report_accuracy(nn.Linear(6, 3), batches)
    crash = crash_from(report_accuracy, nn.Linear(6, 3), batches)
    answered = [Suggestion(kind="skip_iteration", explanation="iteration", confidence=0.9),
                Suggestion(kind="skip", explanation="report", confidence=0.5)]
    found = rank(candidates(Verification(crash, settings()), answered))
    assert [c.explanation for c in found] == ["report", "iteration"]


# -- in automatic mode, with trials ---------------------------------------------------------------------


def the_bot_answers(monkeypatch: pytest.MonkeyPatch, suggestions: list[Suggestion]) -> None:
    """The bot's diagnosis with `suggestions` in their order, as a bot ranking by confidence would answer."""
    real = automatic_mode.ask_bot

    def answer(report: Any, url: str | None, deadline: float) -> BotAnswer:
        found = real(report, url, deadline=deadline)
        return BotAnswer(diagnosis=found.diagnosis, suggestions=suggestions, backend_used="model", source="test")

    monkeypatch.setattr(automatic_mode, "ask_bot", answer)


def trials(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "daifu_workspace" / "repairbot_suggestions.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()][-1]["trials"]


@needs_trials
def test_a_value_edit_is_tried_before_a_jump_the_bot_was_surer_of(automatic, tmp_path, monkeypatch) -> None:
    value = surgery(train_step, "loss = crit(out, y)", VALUE)
    the_bot_answers(monkeypatch, [
        Suggestion(kind="surgery", code=surgery(train_step, "loss = crit(out, y)", JUMP), explanation="jump",
                   confidence=0.9),
        Suggestion(kind="surgery", code=value, explanation="value", confidence=0.5),
    ])
    model, optimizer, crit, batches = float_labels()
    assert daifu.transform(fresh(train_step))(model, optimizer, crit, batches) == 4
    (repair,) = automatic()
    assert repair["code"] == value and [t["code"] for t in trials(tmp_path)] == [value]


def train_with_noise(model, optimizer, crit, batches, noise):
    steps = 0
    for xb, y in batches:
        x = xb + noise
        loss = crit(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps += 1
    return steps


@needs_trials
def test_of_two_repairs_that_pass_the_one_whose_trial_gave_up_less_is_applied(automatic, tmp_path, monkeypatch,
                                                                             capfd) -> None:
    # a noise buffer made for the configured batch of 4 meets a batch of 8; the first repair the bot offers cuts
    # the batch to the buffer (its trial counts the rows dropped), the second tiles the buffer over the batch
    old = "x = xb + noise"
    cut = surgery(train_with_noise, old,
                  "x, y = xb.narrow(0, 0, noise.shape[0]) + noise, y.narrow(0, 0, noise.shape[0])")
    tile = surgery(train_with_noise, old, "x = xb + noise.repeat(xb.shape[0] // noise.shape[0], 1)")
    the_bot_answers(monkeypatch, [Suggestion(kind="surgery", code=cut, explanation="cut", confidence=0.9),
                                  Suggestion(kind="surgery", code=tile, explanation="tile", confidence=0.6)])
    torch.manual_seed(0)
    model = nn.Linear(6, 3)
    batches = [(torch.randn(4, 6), torch.randint(0, 3, (4,))) for _ in range(3)] + [
        (torch.randn(8, 6), torch.randint(0, 3, (8,)))]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    assert daifu.transform(fresh(train_with_noise))(model, optimizer, nn.CrossEntropyLoss(), batches,
                                                    torch.randn(4, 6)) == 4
    (repair,) = automatic()
    tried = trials(tmp_path)
    assert [t["code"] for t in tried] == [cut, tile] and all(t["outcome"] == "completed" for t in tried)
    assert [sum(it["rows_dropped"] for it in t["iterations"]) for t in tried] == [4, 0]
    assert repair["code"] == tile
    said = capfd.readouterr().err
    assert "passed its trial giving up less than the one that passed before it: rows of a batch -> nothing" in said
    assert "passed, but gave up more than the one applied" in said


def test_the_estimate_reads_what_an_edit_adds_not_what_the_function_had() -> None:
    from repairbot import giving_up

    old = "def f(xs):\n    for x in xs:\n        if x is None:\n            continue\n        y = g(x)\n    return y\n"
    assert giving_up.of_code("surgery", old.replace("g(x)", "g(x.float())"), old) == giving_up.NOTHING
    assert giving_up.of_code("surgery", old.replace("y = g(x)", "y = g(x)[0]"), old) == giving_up.NOTHING
    assert giving_up.of_code("surgery", old.replace("y = g(x)", "x = x[:4]\n        y = g(x)"), old) == giving_up.ROWS
    assert giving_up.of_code("surgery", old.replace("y = g(x)", "if x.sum() > 9:\n            break\n        y = g(x)"),
                             old) == giving_up.ITERATION
    assert giving_up.of_code("action", "model.fc = torch.nn.Linear(3, 4)", None) == giving_up.STATE
    assert giving_up.of_code("patch_function", "def h(a):\n    return a[:2]\n", None) == giving_up.NOTHING
