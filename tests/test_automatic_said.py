"""What automatic mode says on the terminal it tried, when no suggestion of the bot was applied: one line
per candidate (its kind, its edit in short, its verdict), the first few only, then where the rest is."""

# ruff: noqa: E402
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pexpect")

from daifu.core.decisions import Action
from daifu.decide.candidates import Candidate
from daifu.decide.tried import SHOWN, tried_lines
from repairbot.protocol import Suggestion
from tests.terminal import program, spawn


def test_a_refused_candidate_is_named_with_its_verdict_and_where_to_read_more(tmp_path: Path) -> None:
    terminal = spawn(tmp_path, [program("refused_skip.py")])
    said = [line for line in terminal.finish().splitlines() if line.startswith("DaiFu: ")]
    assert terminal.status == 1
    first = next(n for n, line in enumerate(said) if "suggestion of the repair bot, none applied" in line)
    assert said[first] == "DaiFu: tried 1 suggestion of the repair bot, none applied:", said
    assert said[first + 1].startswith("DaiFu:   1. skip_iteration: refused: it passes over work in 2 iterations, "
                                      "where 1 is (the crashed one) allowed"), said
    assert "; trial: iteration finished in " in said[first + 1]
    workspace = tmp_path / "ws"
    assert said[first + 2] == (f"DaiFu: the rest (each check, each whole trial): daifu report --record {workspace} 1, "
                               f"or {workspace / 'repairbot_suggestions.jsonl'}"), said
    assert "is raised: no suggestion of the repair bot passed its checks and its trial" in said[first + 3]


def test_many_candidates_are_cut_to_the_first_few_then_counted() -> None:
    found = [Candidate(Action(f"x = {n}"), Suggestion(kind="action", code=f"x = {n}", explanation="", confidence=0.5),
                       given_problems=(f"problem {n}",)) for n in range(SHOWN + 3)]
    lines = tried_lines(found, "def f():\n    x = 1\n")
    assert lines[0] == f"tried {SHOWN + 3} suggestions of the repair bot, none applied:"
    assert lines[1] == "  1. action `x = 0`: refused by the runtime's check: problem 0"
    assert len(lines) == 1 + SHOWN + 1 and lines[-1] == "  and 3 more"
