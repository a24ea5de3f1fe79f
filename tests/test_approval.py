"""The approval prompt for repair-bot suggestions, answered through a scripted `input`."""

# ruff: noqa: E402
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable

import pytest

for _package in ("pydantic", "httpx"):
    pytest.importorskip(_package)

import daifu
from daifu.console.approval import approve
from daifu.core.crash import Crash
from daifu.core.decisions import Decision
from tests.botfixtures import context_for


@dataclass
class Suggestion:
    kind: str
    code: str
    explanation: str
    confidence: float = 0.5


def fresh_add_all() -> Callable[[list[Any]], int]:
    """A new `add_all` for each test: vaccination and surgeries change the function object itself."""

    def add_all(items: list[Any]) -> int:
        total = 0
        for item in items:
            total = total + item
        return total

    return add_all


def answering(monkeypatch: pytest.MonkeyPatch, *answers: str) -> list[str]:
    """Script `input`; returns the prompts it was shown."""
    queue, asked = list(answers), []

    def fake_input(prompt: str = "") -> str:
        asked.append(prompt)
        if not queue:
            raise EOFError
        return queue.pop(0)

    monkeypatch.setattr("builtins.input", fake_input)
    return asked


def approval_prompt(crash: Crash, diagnosis: str, suggestions: list[Suggestion]) -> Decision | None:
    """The approval prompt of automatic mode, asked from a policy (as the person at the terminal is)."""
    return approve(crash, context_for(crash, daifu.settings()), diagnosis, suggestions)


def prompting(*suggestions: Suggestion) -> Callable[[], int]:
    """`add_all` vaccinated, with a policy that asks the prompt about `suggestions`."""
    daifu.set_policy(lambda crash: approval_prompt(crash, "a str in a list of ints", list(suggestions)))
    return daifu.transform(fresh_add_all())  # type: ignore[no-any-return]


def fixed_source(function: Callable[..., Any]) -> str:
    return function.__daifu__.current.source.replace("total + item", "total + int(item)")  # type: ignore[attr-defined]


def test_apply_takes_the_surgery_after_showing_its_diff(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    vaccinated = daifu.transform(fresh_add_all())
    surgery = Suggestion("surgery", fixed_source(vaccinated), "convert each item", 0.9)
    daifu.set_policy(lambda crash: approval_prompt(crash, "a str in a list of ints", [surgery]))
    answering(monkeypatch, "a")
    assert vaccinated([1, "2", 3]) == 6
    out = capsys.readouterr().out
    assert "a str in a list of ints" in out and "+            total = total + int(item)" in out and "Check: ok" in out
    faulty = Path(__file__).read_text().splitlines().index("            total = total + item") + 1
    where = f"{__file__}:{faulty}: total = total + int(item)"
    assert f"Applying suggestion 1 (surgery): the new add_all resumes at {where}.\n" in out


def test_reject_and_next_move_through_the_suggestions(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    vaccinated = prompting(Suggestion("action", "item = 100", "replace the item"), Suggestion("skip", "", "skip it"))
    asked = answering(monkeypatch, "n", "r", "a")
    assert vaccinated([1, "2", 3]) == 104  # the skip was rejected; the action applied
    assert len(asked) == 3 and "Suggestion 2/2 (skip" in capsys.readouterr().out


def test_a_refused_suggestion_is_not_applied(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    vaccinated = prompting(Suggestion("action", "item = (", "broken"))
    answering(monkeypatch, "a", "s")
    assert vaccinated([1, "2", 3]) == 4
    assert "Not applied: the action does not parse" in capsys.readouterr().out


def test_end_of_input_raises_the_original_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    vaccinated = prompting(Suggestion("retry", "", "try again"))
    answering(monkeypatch)
    with pytest.raises(TypeError, match="unsupported operand"):
        vaccinated([1, "2", 3])


def test_edit_reads_the_workspace_file_back(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("EDITOR", "sed -i s/item\\ =\\ 0/item\\ =\\ 7/")
    vaccinated = prompting(Suggestion("action", "item = 0\n", "zero it"))
    answering(monkeypatch, "e", "a")
    assert vaccinated([1, "2", 3]) == 11


def test_quit_opens_the_console(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    vaccinated = prompting(Suggestion("retry", "", "try again"))
    answering(monkeypatch, "q", "skip", "q")  # the console reads its commands through input() too
    assert vaccinated([1, "2", 3]) == 4
    assert "DaiFu caught TypeError" in capsys.readouterr().out
