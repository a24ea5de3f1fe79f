"""A verified repair offered again at a statement of the same shape (`daifu.decide.same_shape`), on real crashes.

The first run repairs `loss = crit(out, y)` in a training step: a real repair-bot server (rules backend)
proposes `.long()` on the float class labels, the trial passes, the repair goes into the workspace's
`repairs.jsonl`. Then another function crashes at a statement of the same shape with other names; the bot
asked about it proposes nothing (as a bot that knows no rule for the message would), so whatever is tried
there came from the workspace's memory, renamed by the correspondence of the two statements' trees, and
tried on a copy of the run before it is applied.
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
from daifu.core.trial import unavailable
from daifu.decide.botclient import BotAnswer
from daifu.decide.same_shape import correspondence, renamed, shape
from tests.copies import fresh

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = [pytest.mark.torch, pytest.mark.skipif(unavailable() is not None, reason=f"no trials: {unavailable()}")]


def answers(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "daifu_workspace" / "repairbot_suggestions.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def bot_proposes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on the bot diagnoses but proposes no repair."""
    real = automatic_mode.ask_bot

    def nothing(report: Any, url: str | None, deadline: float) -> BotAnswer:
        answer = real(report, url, deadline=deadline)
        return BotAnswer(diagnosis=answer.diagnosis, suggestions=[], backend_used="none", source="test")

    monkeypatch.setattr(automatic_mode, "ask_bot", nothing)


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


def evaluate(model, crit, batches):
    total = 0.0
    for x2, t2 in batches:
        o2 = model(x2)
        l2 = crit(o2, t2)
        total += l2.item()
    return total


def evaluate_fixed(model, crit, batches):
    total = 0.0
    for x2, t2 in batches:
        o2 = model(x2)
        l2 = crit(o2, t2.long())
        total += l2.item()
    return total


def setup(labels: Callable[[int], Any] | None = None) -> tuple[Any, Any, Any, list[tuple[Any, Any]]]:
    torch.manual_seed(0)
    model = nn.Linear(6, 3)
    batches = [(torch.randn(8, 6), (labels or (lambda _: torch.randint(0, 3, (8,)).float()))(i)) for i in range(4)]
    return model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(), batches


def learn_at_the_training_step(automatic: Callable[[], list[dict[str, Any]]]) -> None:
    model, optimizer, crit, batches = setup()
    assert daifu.transform(fresh(train_step))(model, optimizer, crit, batches) == 4
    (first,) = automatic()
    assert first["decision"] == "Surgery" and first["replaced_by"] == "loss = crit(out, y.long())"


def test_a_repair_verified_at_one_statement_is_offered_renamed_and_verified_at_the_same_shape(
        automatic, tmp_path, monkeypatch, capfd) -> None:
    learn_at_the_training_step(automatic)
    bot_proposes_nothing(monkeypatch)
    model, _, crit, batches = setup()
    total = daifu.transform(fresh(evaluate))(model, crit, batches)
    second = automatic()[-1]
    assert second["function"] == "evaluate" and second["decision"] == "Surgery"
    assert "l2 = crit(o2, t2.long())" in second["code"] and second["trials"][0]["verdict"] == "completed"
    (offered,) = answers(tmp_path)[-1]["suggestions"]
    assert "same shape" in offered["explanation"] and offered["code"] == second["code"]
    assert total == pytest.approx(evaluate_fixed(model, crit, batches))
    said = capfd.readouterr().err
    assert "offering the repair verified at a statement of the same shape at test_same_shape.py:" in said


def test_a_statement_of_the_same_shape_with_another_exception_type_is_not_offered(
        automatic, tmp_path, monkeypatch) -> None:
    learn_at_the_training_step(automatic)
    bot_proposes_nothing(monkeypatch)
    model, _, crit, batches = setup(lambda _: torch.full((8,), 5))  # class 5 of 3: IndexError, not RuntimeError
    with pytest.raises(IndexError, match="out of bounds"):
        daifu.transform(fresh(evaluate))(model, crit, batches)
    last = answers(tmp_path)[-1]
    assert last["function"] == "evaluate" and last["exception"] == "IndexError"
    assert last["suggestions"] == [] and last["trials"] == []


def test_a_renamed_repair_that_does_not_repair_the_new_crash_is_refused_by_its_trial(
        automatic, tmp_path, monkeypatch) -> None:
    learn_at_the_training_step(automatic)
    bot_proposes_nothing(monkeypatch)
    model, _, crit, batches = setup(lambda _: torch.full((8,), 5.0))  # float labels, and past the 3 classes
    with pytest.raises(RuntimeError) as plain:
        evaluate(model, crit, batches)
    with pytest.raises(RuntimeError) as vaccinated:
        daifu.transform(fresh(evaluate))(model, crit, batches)
    assert str(vaccinated.value) == str(plain.value)  # the user's own exception, unchanged
    last = answers(tmp_path)[-1]
    (offered,) = last["suggestions"]
    assert "same shape" in offered["explanation"] and "l2 = crit(o2, t2.long())" in offered["code"]
    assert [t["outcome"] for t in last["trials"]] == ["raised"] and "out of bounds" in last["trials"][0]["detail"]
    assert automatic()[-1]["decision"] == "Raise"


# -- the correspondence of two statements -------------------------------------------------------------


def test_statements_of_one_shape_pair_their_names_one_to_one() -> None:
    assert shape("loss = crit(out, y)") == shape("l2 = crit(o2, t2)") != shape("l2 = crit(o2, t2, 1)")
    pairing = correspondence("loss = crit(out, y)", "l2 = crit(o2, t2)")
    assert pairing is not None
    assert renamed("loss = crit(out, y.long())", pairing, {"l2", "crit", "o2", "t2"}) == "l2 = crit(o2, t2.long())"
    assert correspondence("loss = crit(out, out)", "l2 = crit(o2, t2)") is None  # not one to one
    assert correspondence("loss = crit(out, y)", "l2 = crit(o2, o2)") is None


def test_a_renamed_repair_never_overwrites_a_name_the_new_function_uses() -> None:
    pairing = correspondence("loss = crit(out, y)", "l2 = crit(o2, t2)")
    assert pairing is not None
    code = "labels = y.long()\nloss = crit(out, labels)"
    assert renamed(code, pairing, {"l2", "crit", "o2", "t2"}) == "labels = t2.long()\nl2 = crit(o2, labels)"
    assert renamed(code, pairing, {"l2", "crit", "o2", "t2", "labels"}) is None


def test_a_repair_after_which_the_crash_came_back_without_progress_is_not_learned() -> None:
    """A retry of a write into a folder that cannot exist, taken on trust three times, repaired nothing: it is
    not tried first at the next run's crash there ("it repaired this crash before")."""
    from daifu.decide.candidates import _followed_by_no_progress

    def entry(repair: int, attempt: int, pid: int = 7, line: int = 22) -> dict[str, Any]:
        return {"repair": repair, "attempt": attempt, "pid": pid, "function": "train", "file": "t.py", "line": line,
                "exception_type": "RuntimeError"}

    retried = [entry(1, 1), entry(2, 2), entry(3, 3)]
    moved_on = [entry(4, 1, pid=8), entry(5, 1, pid=8)]  # each crash at a new step: progress between them
    elsewhere = [entry(6, 1, pid=9), entry(7, 2, pid=9, line=30)]
    newest_first = list(reversed(retried + moved_on + elsewhere))
    failed = _followed_by_no_progress(newest_first)
    assert failed == {id(retried[0]), id(retried[1])}  # the last retry's outcome is unknown from the record alone
