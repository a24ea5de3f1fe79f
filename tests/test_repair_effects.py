"""Unattended, an effect a repair's own code reaches in its trial fails it (issue 28.3).

A trial stops at the first effect. Before, "stopped at effect" passed whoever reached it, so a repair
whose own code wrote a file was applied, and the file was written for real. Now the trial's verdict
says which code the effect was reached through (`Verdict.reached`), and `daifu.decide.trial_effects`
tells the repair's code (an action, the changed lines of a surgery) from the program's:

- an action calling the program's helper, which writes through an object the allowlist cannot look
  into, is not applied, and nothing is written;
- the same program saving its own checkpoint after the repaired statement, in the same iteration,
  is still repaired: the program's effect is the program's;
- a surgery whose changed line writes through the same helper is not applied either.

A real training run in automatic mode with `approve="auto"`, a scripted bot over HTTP, real trials.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

import daifu
from daifu.core import trial
from repairbot.protocol import Suggestion
from tests.botfixtures import ScriptedBot, served_scripted_bot
from tests.copies import fresh

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = pytest.mark.skipif(trial.unavailable() is not None, reason=f"no trials here: {trial.unavailable()}")


class Journal:
    """The program's own log, appending to a file."""

    def __init__(self, path: str) -> None:
        self.path = path

    def emit(self, text: str) -> None:
        with open(self.path, "a", encoding="utf-8") as stream:
            stream.write(text)


def note(journal, text):
    journal.emit(text)


def train_with_journal(model, optimizer, batches, journal, checkpoint):
    for x, y in batches:
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        torch.save(model.state_dict(), checkpoint)
    return loss.item()


@pytest.fixture(scope="module")
def bot() -> Iterator[tuple[ScriptedBot, str]]:
    with served_scripted_bot() as served:
        yield served


def run(bot_url: str, tmp_path: Path) -> tuple[Any, Path, Path]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [(torch.randn(2, 4), torch.tensor([0.0, 1.0]))]
    journal, checkpoint = tmp_path / "journal.txt", tmp_path / "model.pt"
    daifu.configure(mode="automatic", approve="auto", bot_url=bot_url, workspace=tmp_path / "ws")
    result = daifu.transform(fresh(train_with_journal))(model, optimizer, batches, Journal(str(journal)),
                                                        str(checkpoint))
    return result, journal, checkpoint


def offer(bot: ScriptedBot, kind: str, code: str) -> None:
    bot.suggestions = [Suggestion(kind=kind, code=code, explanation="Fix the labels.", confidence=0.9)]  # type: ignore[arg-type]


def test_an_action_whose_own_code_writes_a_file_in_its_trial_is_not_applied(
    bot: tuple[ScriptedBot, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scripted, url = bot
    offer(scripted, "action", "note(journal, 'the repair was here')\ny = y.long()")
    with pytest.raises(RuntimeError, match="expected target dtype to be Long"):
        run(url, tmp_path)
    assert not (tmp_path / "journal.txt").exists()
    err = capsys.readouterr().err
    assert "none applied" in err and "1. action" in err and "for writing" in err, err  # a line per candidate
    record = (tmp_path / "ws" / "repairbot_suggestions.jsonl").read_text()
    assert "its own code (<daifu action" in record and "for writing" in record, record


def test_a_surgery_whose_changed_line_writes_a_file_in_its_trial_is_not_applied(
    bot: tuple[ScriptedBot, str], tmp_path: Path
) -> None:
    scripted, url = bot
    source = inspect.getsource(train_with_journal).replace(
        "        loss = F.cross_entropy(model(x), y)\n",
        "        note(journal, 'the repair was here')\n        loss = F.cross_entropy(model(x), y.long())\n",
    )
    offer(scripted, "surgery", source)
    with pytest.raises(RuntimeError, match="expected target dtype to be Long"):
        run(url, tmp_path)
    assert not (tmp_path / "journal.txt").exists()


def test_the_programs_own_effect_after_the_repair_still_lets_it_pass(
    bot: tuple[ScriptedBot, str], tmp_path: Path
) -> None:
    scripted, url = bot
    offer(scripted, "action", "y = y.long()")
    loss, journal, checkpoint = run(url, tmp_path)
    assert loss > 0 and checkpoint.exists() and not journal.exists()
