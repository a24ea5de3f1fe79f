"""Every kind of decision through every encoding of it, and back: the one table (`daifu.core.kinds`) holds.

A decision is stored (the record's JSON, `repairs.jsonl` read back by the replay, a broadcast file, the
distributed store), proposed by the bot (its suggestion kinds, the model's kinds), chosen on the
approval page (its choices and their labels) and taken at the console (its words). Each test takes
one sample of each kind through one of these and checks that what comes back is the same decision,
or that the kind has no name there. `SAMPLES` must hold a decision of every kind of the table: a kind
added without one fails `test_every_kind_has_a_sample`.
"""

# ruff: noqa: E402
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, get_args

import pytest

for _package in ("pydantic", "httpx"):
    pytest.importorskip(_package)

import daifu
from daifu.config import Settings
from daifu.core import kinds
from daifu.core.crash import Crash
from daifu.core.decisions import (
    Action,
    BadDecision,
    Decision,
    Pass,
    Patch,
    Plays,
    Raise,
    Retry,
    Skip,
    SkipIteration,
    Surgery,
)
from daifu.decide import broadcast, distributed, replay
from daifu.decide.candidates import to_decision
from daifu.store import record
from repairbot.backends.openai import reply_schema
from repairbot.llm_parse import MODEL_KINDS, read_proposal
from repairbot.prompts import render, values
from repairbot.protocol import (
    CHOICES,
    EDIT_KINDS,
    PLAIN_CHOICES,
    RepairChoice,
    Suggestion,
    SuggestionKind,
    describe_choice,
)
from tests.botfixtures import context_for, crash_from

SURGERY = "def halves(values):\n    total = 0\n    for n in values:\n        total += int(n) // 2\n    return total\n"
SAMPLES: list[Decision] = [
    Pass(),
    Retry(),
    Skip(),
    SkipIteration(),
    Action("n = int(n)"),
    Surgery(SURGERY),
    Patch("tests.test_kinds:halves", SURGERY),
    Raise(),
    Plays((Action("n = int(n)"), Surgery(SURGERY), Skip())),
]


def halves(values: list[Any]) -> int:
    total = 0
    for n in values:
        total += n // 2
    return total


def a_crash() -> Crash:
    return crash_from(halves, [2, "4"])


def test_every_kind_has_a_sample() -> None:
    assert sorted(kinds.kind_of(d).play for d in SAMPLES) == sorted(kind.play for kind in kinds.KINDS)
    assert all(kinds.is_decision(d) for d in SAMPLES) and not kinds.is_decision("Retry")


@pytest.mark.parametrize("decision", SAMPLES, ids=repr)
def test_the_record_data_and_the_distributed_store(decision: Decision) -> None:
    assert kinds.from_data(json.loads(json.dumps(kinds.to_data(decision)))) == decision
    assert distributed.decode(distributed.encode(decision)) == decision
    assert kinds.step_names(decision) == ([kinds.play_name(s) for s in decision.steps] if isinstance(decision, Plays)
                                          else [kinds.play_name(decision)])


@pytest.mark.parametrize("decision", SAMPLES, ids=repr)
def test_a_repairs_jsonl_row_as_the_record_writes_it_and_the_replay_reads_it(decision: Decision,
                                                                             tmp_path: Path) -> None:
    assert kinds.from_row(json.loads(json.dumps(kinds.to_row(decision)))) == decision
    if isinstance(decision, Raise):
        assert kinds.from_row(kinds.to_row(None)) == Raise()  # a repair that failed: the replay passes it over
        return
    settings = Settings(workspace=tmp_path / "ws")
    crash = a_crash()
    entry = record.begin(crash, settings)
    entry.decided(decision, "policy")
    entry.resumed(time.perf_counter())
    steps, _origin = replay._record_steps(settings)
    assert [step.decision(crash) for step in steps] == [decision]
    if kinds.kind_of(decision).replayable:
        assert all(name in kinds.REPLAYABLE for name in kinds.step_names(decision))


@pytest.mark.parametrize("decision", SAMPLES, ids=repr)
def test_a_broadcast_file(decision: Decision, tmp_path: Path) -> None:
    daifu.configure(workspace=tmp_path / "ws")
    crash = a_crash()
    broadcast.save(crash, 1, [decision])
    found = broadcast.lookup(crash)
    assert found is not None and found.decision == decision


@pytest.mark.parametrize("decision", SAMPLES, ids=repr)
def test_the_bots_suggestion_kinds(decision: Decision) -> None:
    kind = kinds.wire_kind(decision)
    if kind is None:
        assert isinstance(decision, (Pass, Raise, Plays))  # never proposed by the bot
        return
    sent = Suggestion(kind=kind, code=kinds.code_of(decision) or "", target=kinds.target_of(decision),  # type: ignore[arg-type]
                      explanation="x", confidence=0.5)
    received = Suggestion.model_validate_json(sent.model_dump_json())
    assert kinds.from_wire(received.kind, received.code, received.target) == decision
    assert to_decision(received) == decision


def test_the_bots_kinds_are_the_protocols_and_an_unknown_one_is_an_error() -> None:
    assert sorted(kinds.wire_kinds()) == sorted(get_args(SuggestionKind))
    with pytest.raises(BadDecision, match="unknown suggestion kind 'halve_lr'"):
        kinds.from_wire("halve_lr")
    with pytest.raises(BadDecision, match="no code"):
        kinds.from_wire("surgery", "")


@pytest.mark.parametrize("decision", SAMPLES, ids=repr)
def test_the_approval_pages_choices_and_labels(decision: Decision) -> None:
    choice = kinds.choice_of(decision)
    if choice is None:
        return
    assert choice in PLAIN_CHOICES and kinds.from_choice(choice) == decision
    label, words = PLAIN_CHOICES[choice]
    assert label and describe_choice(RepairChoice(choice=choice), []) == words  # type: ignore[arg-type]


def test_every_choice_of_the_page_takes_a_decision() -> None:
    """A plain choice takes its decision; `apply` takes a suggestion and `edit` a person's code, of a kind
    the runtime carries out."""
    assert sorted(kinds.choices()) == sorted(PLAIN_CHOICES)
    assert set(CHOICES) == set(PLAIN_CHOICES) | {"apply", "edit"}
    for kind in EDIT_KINDS:
        assert kind in kinds.wire_kinds(carrying_code=True)
        assert kinds.from_wire(kind, SURGERY) == (Surgery(SURGERY) if kind == "surgery" else Action(SURGERY))
    with pytest.raises(BadDecision):
        kinds.from_choice("apply")


@pytest.mark.parametrize("decision", SAMPLES, ids=repr)
def test_the_consoles_words_and_commands(decision: Decision) -> None:
    from daifu.console.session import COMMANDS, Console

    word = kinds.word_of(decision)
    if word is None:
        return
    code = kinds.code_of(decision)
    assert kinds.from_word(word, code) == decision
    crash = a_crash()
    console = Console(crash, context_for(crash, daifu.settings()), 1)
    if code is None:
        assert console._trial_subject(word) == decision  # `trial <word>`
    if kinds.kind_of(decision).command:
        assert word in COMMANDS
        console.onecmd(word)
        assert console.decision == decision


def test_the_models_kinds_are_read_and_offered_from_one_list(tmp_path: Path) -> None:
    for kind in MODEL_KINDS:
        code = {"edit": "        total += int(n) // 2", "action": "n = int(n)"}.get(kind)
        read = read_proposal(1, {"kind": kind, "start_line": 4 if kind == "edit" else None,
                                 "new_code": code, "code": code})
        assert not isinstance(read, str) and read.kind == kind, read
    assert reply_schema()["properties"]["suggestions"]["items"]["properties"]["kind"]["enum"] == list(MODEL_KINDS)
    from daifu.report.build import build_report

    prompt = render("repair", values(build_report(a_crash())))
    assert '"kind": "edit" | "action" | "retry" | "skip",' in prompt
    assert {"retry", "skip"} <= set(MODEL_KINDS) and {"retry", "skip"} <= set(kinds.wire_kinds(carrying_code=False))
