"""A repeat of a crash whose verified repair calls a function of the program that the program rebound since
(`daifu.decide.repeat`): the repair is checked again against the live names, and refused there.

The check a repeat runs again reads what the frame's names hold now, as deep as the allowlist looks (the
repair's callee, and what that callee calls in turn); what it keeps between checks depends on source text
only (`daifu.decide.allowlist_flow`, `daifu.decide.made_calls`). Each program below crashes twice at the same
statement with the same facts; the bot answers with an action calling `complete`, which fills the missing
value. Between the crashes the program's data source rebinds a global: `complete` itself, or `fill`, which
`complete` calls, to a function deleting a file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

import daifu  # noqa: E402
from daifu.core import trial  # noqa: E402
from daifu.state import RUN  # noqa: E402
from repairbot.protocol import Suggestion  # noqa: E402
from tests.botfixtures import ScriptedBot, served_scripted_bot  # noqa: E402
from tests.copies import fresh  # noqa: E402

needs_trials = pytest.mark.skipif(trial.unavailable() is not None, reason=f"no trials here: {trial.unavailable()}")


def fill() -> float:
    """The value a record without one is given."""
    return 0.0


def complete(record: dict[str, Any]) -> dict[str, Any]:
    """`record` with its missing value filled."""
    return {**record, "value": fill()}


def discard(*_: Any) -> Any:
    """What the program rebinds a name to between the crashes: it deletes the file its test names."""
    os.remove(os.environ["DAIFU_TEST_VICTIM"])
    return 0.0


def records(rebind: str | None) -> Iterator[dict[str, Any]]:
    """Records, two of them without a value; before the second, `rebind` (a global name) is made `discard`,
    past the iterations the first repair's trial looks along (`trial_iterations`, 5)."""
    yield {"value": 1.0}
    yield {}
    for _ in range(8):
        yield {"value": 0.25}
    if rebind is not None:
        globals()[rebind] = discard
    yield {}
    yield {"value": 3.0}


def total(data: Iterator[dict[str, Any]]) -> float:
    summed = 0.0
    for record in data:
        if record["value"] >= 0:  # a header: the repeated action is not folded into a surgery (`daifu.decide.fold`)
            summed += record["value"]
    return summed


@pytest.fixture
def bot(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[ScriptedBot, Path]]:
    """The scripted bot proposing `record = complete(record)`, automatic mode against it, and the file
    `discard` would delete; the globals a program rebinds are put back after the test."""
    victim = tmp_path / "keep.txt"
    victim.write_text("kept")
    monkeypatch.setenv("DAIFU_TEST_VICTIM", str(victim))
    monkeypatch.setitem(globals(), "complete", complete)
    monkeypatch.setitem(globals(), "fill", fill)
    with served_scripted_bot() as (scripted, url):
        scripted.suggestions = [Suggestion(kind="action", code="record = complete(record)", confidence=0.9,
                                           explanation="fill the missing value")]
        daifu.configure(mode="automatic", approve="auto", bot_url=url, workspace=tmp_path / "ws")
        yield scripted, victim


@needs_trials
def test_the_same_crash_again_is_repaired_by_the_repeat_path_when_nothing_was_rebound(
        bot: tuple[ScriptedBot, Path], capfd: pytest.CaptureFixture[str]) -> None:
    scripted, victim = bot

    assert daifu.transform(fresh(total))(records(None)) == 6.0
    said = capfd.readouterr().err

    assert [r["decision"] for r in RUN.history] == ["Action", "Action"]
    assert "re-verified by a short trial" in said and len(scripted.requests) == 1
    assert victim.exists()


@needs_trials
@pytest.mark.parametrize("rebound", ["complete", "fill"])
def test_a_repeat_whose_callee_was_rebound_to_reach_the_system_is_refused(
        bot: tuple[ScriptedBot, Path], capfd: pytest.CaptureFixture[str], rebound: str) -> None:
    scripted, victim = bot

    with pytest.raises(KeyError, match="value"):
        daifu.transform(fresh(total))(records(rebound))
    said = capfd.readouterr().err

    assert [r["decision"] for r in RUN.history][0] == "Action"
    assert "no longer passes its checks" in said and "re-verified by a short trial" not in said
    assert len(scripted.requests) == 2  # the full path asked the bot again, and its answer was refused too
    assert victim.read_text() == "kept"
