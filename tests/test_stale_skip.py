"""A skipped statement that assigns is never applied without a person, even when its trial passes.

Skipping `action = pick(state)` leaves `action` holding the previous step's value: the trial (one
iteration) finishes healthy, and the run goes on to a different result that nothing flags. This is
what a REINFORCE program of the DLFailureBenchmark (one NaN observation) once did in automatic mode
(running reward 41 against 60). A bot over real HTTP (`ScriptedBot`) offers only that skip; DaiFu must not apply
it, and the run ends with its own exception. The control: a skipped statement that assigns nothing
(a call made for its effect) is still applied once its trial passes, at most `MAX_SKIPS` times at one site.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

import daifu
from daifu.core.trial import unavailable
from daifu.decide.candidates import MAX_SKIPS
from daifu.state import RUN
from repairbot.protocol import Suggestion
from tests.botfixtures import ScriptedBot, served_scripted_bot
from tests.copies import fresh

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"no trials: {unavailable()}")


def pick(state: float) -> int:
    if math.isnan(state):
        raise ValueError("the policy's probabilities hold nan")
    return 1 if state > 0.5 else 0


def act(states: list[float], taken: list[int]) -> int:
    total = 0
    for state in states:
        action = pick(state)
        taken.append(action)
        total += action
    return total


def logged(states: list[float], log: list[float]) -> int:
    count = 0
    for state in states:
        count += 1
        log.append(pick(state))
    return count


@pytest.fixture(scope="module")
def bot() -> Iterator[tuple[ScriptedBot, str]]:
    with served_scripted_bot() as served:
        yield served


@pytest.fixture
def skipping(bot: tuple[ScriptedBot, str], tmp_path: Path) -> int:
    """Automatic mode (`approve="auto"`) with a bot that answers every crash with one skip; the number
    of repairs recorded before the test (`RUN.repairs_since`)."""
    scripted, url = bot
    scripted.suggestions = [Suggestion(kind="skip", explanation="Pass over the faulty statement this time.",
                                       confidence=0.45)]
    daifu.configure(mode="automatic", approve="auto", bot_url=url, workspace=tmp_path / "ws")
    return RUN.recorded


def answers(workspace: Path) -> list[dict]:
    path = workspace / "repairbot_suggestions.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_a_skip_that_would_leave_a_stale_value_is_not_applied_unattended(skipping: int, tmp_path: Path) -> None:
    taken: list[int] = []
    with pytest.raises(ValueError, match="hold nan"):
        daifu.transform(fresh(act))([0.9, 0.1, float("nan"), 0.7], taken)
    assert [r["decision"] for r in RUN.repairs_since(skipping)] == ["Raise"]
    assert taken == [1, 0]  # the stale `action` (0) was never appended for the NaN state
    suggestion = answers(tmp_path / "ws")[0]["suggestions"][0]
    assert suggestion["valid"] and not suggestion["unattended"]
    assert "`action`" in " ".join(suggestion["needs_person"])


def test_a_skip_of_a_statement_that_assigns_nothing_is_still_applied(skipping: int) -> None:
    log: list[float] = []
    count = daifu.transform(fresh(logged))([0.9, float("nan"), 0.7], log)
    assert count == 3 and log == [1, 1]
    repairs = RUN.repairs_since(skipping)
    assert [r["decision"] for r in repairs] == ["Skip"]
    assert [t["verdict"] for t in repairs[0]["trials"]] == ["completed"]


def test_skips_at_one_site_are_bounded(skipping: int) -> None:
    """`MAX_SKIPS` bot skips at one site, then the crash raises: the same crash batch after batch is a bug.
    (With the default budget of what a repair may pass over, the second skip is stopped already:
    `tests/test_account.py`; this bound holds without one.)"""
    daifu.configure(pass_over="unlimited")
    log: list[float] = []
    with pytest.raises(ValueError, match="hold nan"):
        daifu.transform(fresh(logged))([0.9] + [float("nan")] * (MAX_SKIPS + 2), log)
    assert [r["decision"] for r in RUN.repairs_since(skipping)] == ["Skip"] * MAX_SKIPS + ["Raise"]


def test_code_outside_the_allowlist_is_not_run_before_a_person_chooses(tmp_path: Path) -> None:
    from daifu.config import settings
    from daifu.decide.candidates import candidates
    from daifu.decide.verify import Verification

    suggestions = [
        Suggestion(kind="action", code="import subprocess\nstate = 0.0", explanation="outside the allowlist",
                   confidence=0.9),
        Suggestion(kind="action", code="state = 0.0", explanation="inside it", confidence=0.8),
    ]
    seen: dict[str, list] = {}

    def policy(crash):
        stage = Verification(crash, settings())
        options = stage.for_a_person(candidates(stage, suggestions))
        seen["options"] = [(c.suggestion.code, bool(c.unsafe), c.verdict is not None) for c in options]
        return daifu.Skip()

    daifu.configure(workspace=tmp_path / "ws")
    daifu.set_policy(policy)
    daifu.transform(fresh(act))([0.9, float("nan")], [])
    # both offered to the person; only the allowlisted one was run, on a copy, before the choice
    assert seen["options"] == [("import subprocess\nstate = 0.0", True, False), ("state = 0.0", False, True)]
