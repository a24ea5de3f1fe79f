"""The console's `ask`, typed at through a real pseudo-terminal: the program asks the real repair-bot
service on 127.0.0.1, whose openai backend asks a fake OpenAI-wire model (`tests/fakellm.py`);
offline, the embedded rules engine answers in the program itself."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.extras import BOT

for _package in (*BOT, 'pexpect'):
    pytest.importorskip(_package)

from daifu.console.prompt import CHOICES
from repairbot.backends.base import NO_QUESTIONS
from repairbot.backends.openai import OpenAIBackend, forget_capabilities
from repairbot.server import start_in_thread
from tests.fakellm import FakeLLM
from tests.terminal import Terminal, line_of, program, spawn

FAULTY = "total = total + item"
LINE = line_of("accumulate.py", FAULTY)
ANSWER = "`data` holds the string '3' among the integers, and `int + str` is undefined."
MARK = "The model (test-model) says, not DaiFu (nothing in it was run): "
"""How the service gives the model's words: as the model's, and, holding code, saying nothing in it was run."""


def model_reply(body: dict[str, Any]) -> str:
    """What the fake model answers about accumulate.py: an edit converting the item, a retry (which
    cannot work), a skip; and, when a question is asked, an answer that quotes it (so a test sees
    which question it answers)."""
    prompt = body["messages"][-1]["content"]
    asked = prompt.split("now asks: ", 1)[1].split("\n", 1)[0] if "now asks: " in prompt else None
    reply: dict[str, Any] = {
        "diagnosis": {
            "category": "exceptional_data",
            "culprit_function": "main",
            "culprit_line": LINE,
            "explanation": "The list mixes integers with the string '3'.",
        },
        "suggestions": [
            {"kind": "edit", "function": "main", "start_line": LINE, "end_line": LINE,
             "new_code": "        total = total + int(item)", "code": None,
             "explanation": "Convert each item to an integer before adding it.", "confidence": 0.9},
            {"kind": "retry", "function": None, "start_line": None, "end_line": None, "new_code": None,
             "code": None, "explanation": "Run the addition again.", "confidence": 0.5},
            {"kind": "skip", "function": None, "start_line": None, "end_line": None, "new_code": None,
             "code": None, "explanation": "Leave the bad item out.", "confidence": 0.3},
        ],
    }
    if asked is not None:
        reply["answer"] = f"{ANSWER} (You asked: {asked})"
    return json.dumps(reply)


@pytest.fixture
def service() -> Iterator[tuple[str, FakeLLM]]:
    """The repair-bot service with the openai backend, asking a fake model; its URL and the model."""
    forget_capabilities()
    with FakeLLM(model_reply) as llm:
        url, stop = start_in_thread(OpenAIBackend(base_url=llm.url, model="test-model"), cache_seconds=0)
        try:
            yield url, llm
        finally:
            stop()
    forget_capabilities()


def crashed(tmp_path: Path, **env: str) -> Terminal:
    terminal = spawn(tmp_path, [program("accumulate.py")], **env)
    terminal.wait_prompt()
    return terminal


def ask(terminal: Terminal, line: str) -> str:
    """Type `ask ...` and read up to the approval prompt's question."""
    terminal.child.sendline(line)
    terminal.child.expect_exact(f"{CHOICES}? ")
    return str(terminal.child.before).replace("\r\n", "\n")


def answer(terminal: Terminal, letter: str) -> str:
    """Answer the approval prompt with `letter` and read up to its next question."""
    terminal.child.sendline(letter)
    terminal.child.expect_exact(f"{CHOICES}? ")
    return str(terminal.child.before).replace("\r\n", "\n")


def test_ask_answers_the_question_offers_tried_suggestions_and_applies_the_chosen_one(
    tmp_path: Path, service: tuple[str, FakeLLM]
) -> None:
    url, llm = service
    terminal = crashed(tmp_path, DAIFU_REPAIRBOT_URL=url)
    shown = ask(terminal, "ask why does adding the item fail?")
    assert f"Asking the repair bot ({url})..." in shown
    assert f"The repair bot (openai at {url}) answered." in shown
    assert "Your question: why does adding the item fail?" in shown
    assert f"Answer:\n  {MARK}{ANSWER} (You asked: why does adding the item fail?)" in shown  # the model's words
    assert "Trying 3 of its 3 usable suggestions on a copy of the run..." in shown
    assert "[exceptional_data] culprit: main" in shown and "The list mixes integers with the string '3'." in shown
    assert "Suggestion 1/3 (surgery, confidence 0.90): Convert each item to an integer" in shown
    assert f"-        {FAULTY}" in shown and "+        total = total + int(item)" in shown
    assert "Trial: iteration finished in" in shown and "state kept" in shown  # its verdict, from a copy of the run
    retry = answer(terminal, "n")
    assert "Suggestion 2/3 (retry" in retry and "Trial: raised TypeError" in retry
    assert "Suggestion 3/3 (skip" in answer(terminal, "n")
    answer(terminal, "n")  # back to the first
    chosen = terminal.command("a")
    assert "Chosen from the repair bot's suggestions: Surgery: it takes effect when you leave" in chosen
    assert (tmp_path / "ws" / "(surgery-1)main.py").exists() is False  # nothing written: the decision is pending
    out = terminal.leave("q")
    assert "Leaving the console with Surgery: the new main resumes at" in out
    assert "FINAL total=10 seen=[1, 2, '3', 4] trace=None" in out  # resumed at the faulty statement, state kept
    assert "Surgery `total = total + int(item)` (by a person at the console, suggested by bot)" in out, out
    assert re.search(r"resumed in [\d.]+ ms, after [\d.]+ s waiting for a person", out), out
    assert terminal.status == 0
    assert len(llm.requests) == 1
    assert "The person at the console now asks: why does adding the item fail?" in llm.prompts[0]
    records = [json.loads(line) for line in (tmp_path / "ws" / "repairs.jsonl").read_text().splitlines()]
    assert [(r["decision"], r["decided_by"], r["suggested_by"], r["decided_at"]) for r in records] == [
        ("Surgery", "person", "bot", "console")]  # a person decided at the console, on the bot's suggestion
    assert records[0]["waited_ms"] > 0
    answers = [json.loads(line) for line in (tmp_path / "ws" / "repairbot_suggestions.jsonl").read_text().splitlines()]
    assert answers[0]["transcript"]["messages"] == llm.requests[0]["messages"]
    assert answers[0]["answer"].startswith(MARK + ANSWER)


def test_a_follow_up_ask_carries_the_conversation_and_what_was_tried(
    tmp_path: Path, service: tuple[str, FakeLLM]
) -> None:
    url, llm = service
    terminal = crashed(tmp_path, DAIFU_REPAIRBOT_URL=url)
    ask(terminal, "ask why does adding the item fail?")
    back = terminal.command("q")  # back to the console, choosing nothing
    assert "No suggestion chosen: the pending decision is unchanged." in back
    shown = ask(terminal, "ask would skipping the item lose data?")
    assert "with the 1 earlier round of this conversation" in shown
    assert "(You asked: would skipping the item lose data?)" in shown
    first, second = llm.prompts
    assert "asked about this crash before" not in first
    assert "  Q: why does adding the item fail?" in second
    assert f"  A: {MARK}{ANSWER} (You asked: why does adding the item fail?) (Diagnosis: [exceptional_data]" in second
    assert "  then: surgery: Convert each item to an integer before adding it. -> trial: iteration finished" in second
    assert "  then: retry: Run the addition again. -> trial: raised TypeError" in second
    assert "  then: skip: Leave the bad item out. (Skipping line" in second
    assert "  then: (none of the suggestions) -> the person chose none of them" in second
    assert second.index("Paused at line") < second.index("Q: why does") < second.index("now asks: would skipping")

    answer(terminal, "n")  # the retry, chosen although its trial failed: the crash comes back
    assert "Chosen from the repair bot's suggestions: Retry" in terminal.command("a")
    again = terminal.leave_to_prompt("q")
    assert "The same crash again here (attempt 2)." in again and "Repair 2." in again
    shown = ask(terminal, "ask and now?")
    assert "with the 2 earlier rounds of this conversation" in shown
    third = llm.prompts[2]
    assert "Already tried at this line (oldest first); do not propose these again:\n  Retry() -> " in third
    assert "  Q: why does adding the item fail?" in third and "  Q: would skipping the item lose data?" in third
    assert "  then: retry: Run the addition again. -> chosen by the person" in third
    assert "The person at the console now asks: and now?" in third
    assert "Chosen from the repair bot's suggestions: Surgery" in terminal.command("a")
    assert "FINAL total=10 seen=[1, 2, '3', 4]" in terminal.leave("q")

    def report(number: int) -> str:
        return spawn(tmp_path, ["-m", "daifu", "report", str(number)]).finish()

    first_repair, second_repair = report(1), report(2)
    assert "The model call behind answer 2 of 2 (model test-model):" in first_repair
    assert "  Q: why does adding the item fail?" in first_repair  # the exact prompt of the follow-up
    assert "The model call behind the answer (model test-model):" in second_repair
    assert "The person at the console now asks: and now?" in second_repair


@pytest.mark.torch
def test_ask_offline_the_rules_engine_answers_what_it_can_and_its_fix_is_applied(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    terminal = spawn(tmp_path, [program("images.py")])  # no DAIFU_REPAIRBOT_URL: the rules engine, in-process
    terminal.wait_prompt()
    shown = ask(terminal, "ask why is the layer refusing the images?")
    assert "Asking the repair bot (the embedded rules engine, in-process)..." in shown
    assert "The repair bot (rules) answered." in shown
    assert f"Answer:\n  {NO_QUESTIONS}" in shown
    assert "[tensor_mismatch] culprit: main" in shown and "expecting 16 input features" in shown
    assert "+        out = model(images.flatten(1))" in shown
    assert "Trial: iteration finished in" in shown and "state kept" in shown
    assert "Chosen from the repair bot's suggestions: Surgery" in terminal.command("a")
    out = terminal.leave("q")
    assert "FINAL steps=3 shapes=[(4, 2), (4, 2), (4, 2)]" in out and terminal.status == 0


def test_ask_offline_with_nothing_to_suggest_says_so_and_the_console_goes_on(tmp_path: Path) -> None:
    terminal = crashed(tmp_path)  # the rules engine knows no fix for adding a str to an int
    shown = terminal.command("ask")
    assert "The repair bot (rules) answered." in shown and "Your question" not in shown
    assert "Root cause:\n  [unknown] culprit: main" in shown
    assert "The repair bot has no suggestion that can be applied here." in shown
    assert "No suggestion chosen: the pending decision is unchanged." in shown
    terminal.command("skip")
    assert "FINAL total=7 seen=[1, 2, '3', 4]" in terminal.leave("q")


def test_the_prompt_applies_each_candidates_own_decision() -> None:
    """The approval prompt rebuilds a decision from what it shows (`to_decision`): for a candidate
    that is the candidate's own decision, a patch's target and a surgery's restored lines included."""
    from daifu.core.decisions import Patch, Surgery
    from daifu.decide.candidates import Candidate, to_decision
    from repairbot.protocol import Suggestion

    patch = Suggestion(kind="patch_function", code="def f():\n    return 1\n", explanation="x", confidence=0.5,
                       target="module:f")
    restored = Surgery("def g():\n    key = 'the real one'\n    return key\n")
    sent = Suggestion(kind="surgery", code="def g():\n    key = '<redacted:secret>'\n    return key\n",
                      explanation="y", confidence=0.5)
    assert to_decision(Candidate(to_decision(patch), patch)) == Patch("module:f", patch.code)
    assert to_decision(Candidate(restored, sent)) == restored
