"""What a model call leaves behind, and a person's question, through the real service and a fake OpenAI-wire model.

The transcript (the messages sent, the raw reply, tokens, how the reply was read) comes back with
the answer and is bounded; a question and the conversation before it go into the one call, and
change the cache key; the rules engine says it answers no questions; `daifu report N` prints the
exact prompt and reply of a repair the runtime made through the service.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

import httpx
import daifu
from daifu.cli.main import main as daifu_main
from repairbot.backends.base import NO_QUESTIONS
from repairbot.bounds import MAX_REPLY_TEXT
from repairbot.backends.openai import OpenAIBackend, forget_capabilities
from repairbot.protocol import Attempt, Exchange, SuggestResponse
from repairbot.server import start_in_thread
from tests.copies import fresh
from tests.fakellm import FakeLLM, Reply
from tests.llmcases import Case, cases
from tests.replystyles import answer, flat_edit


@pytest.fixture(scope="module")
def train() -> Case:
    return cases()["train"]


@pytest.fixture(autouse=True)
def fresh_capabilities(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("OPENAI_API_KEY", "DAIFU_OPENAI_API_KEY", "DAIFU_OPENAI_MODEL", "DAIFU_BOT_DEADLINE"):
        monkeypatch.delenv(name, raising=False)
    forget_capabilities()
    yield
    forget_capabilities()


def suggest(backend: Any, case: Case, cache_seconds: float = 0, **fields: Any) -> list[dict[str, Any]]:
    """POST each of `bodies` (the report plus `fields`, or one body per item of `fields["bodies"]`)."""
    bodies = fields.pop("bodies", [fields])
    url, stop = start_in_thread(backend, cache_seconds=cache_seconds)
    try:
        replies = [
            httpx.post(f"{url}/v1/suggest", json={"report": case.report.model_dump(mode="json"), **body}, timeout=30)
            for body in bodies
        ]
    finally:
        stop()
    for reply in replies:
        assert reply.status_code == 200, reply.text
        SuggestResponse.model_validate(reply.json())
    return [dict(reply.json()) for reply in replies]


def model(llm: FakeLLM) -> OpenAIBackend:
    return OpenAIBackend(base_url=llm.url, model="test-model")


def test_the_transcript_is_the_exact_call_raw_reply_tokens_and_reading(train: Case) -> None:
    raw = "Here is my answer:\n```json\n" + json.dumps(answer(train, flat_edit(train))) + "\n```"
    with FakeLLM([Reply(content=raw, usage=(1234, 56))]) as llm:
        (response,) = suggest(model(llm), train)
    transcript = response["transcript"]
    assert transcript["messages"] == llm.requests[0]["messages"]  # exactly what the model received
    assert transcript["reply"] == raw  # the raw text, fence and prose included
    assert transcript["model"] == "test-model" and transcript["finish_reason"] == "stop"
    assert transcript["usage"] == {"prompt_tokens": 1234, "completion_tokens": 56}
    assert transcript["notes"] == response["notes"] and "1234 tokens in, 56 out" in transcript["notes"][0]
    assert transcript["cut"] is False and response["answer"] is None


def test_a_server_that_counts_no_tokens_gives_no_usage(train: Case) -> None:
    with FakeLLM([json.dumps(answer(train, flat_edit(train)))]) as llm:
        (response,) = suggest(model(llm), train)
    assert response["transcript"]["usage"] is None


def test_an_unreadable_reply_is_in_the_transcript_with_why_the_rules_answered(train: Case) -> None:
    with FakeLLM(["I am sorry, I cannot produce JSON today."]) as llm:
        (response,) = suggest(model(llm), train)
    assert response["backend_used"] == "rules" and "holds no JSON object" in response["fallback_reason"]
    transcript = response["transcript"]
    assert transcript["reply"] == "I am sorry, I cannot produce JSON today."
    assert transcript["messages"] == llm.requests[0]["messages"]
    assert "holds no JSON object" in transcript["notes"][0]


def test_a_refusal_is_in_the_transcript(train: Case) -> None:
    with FakeLLM([Reply(content=None, refusal="I will not help with that.")]) as llm:
        (response,) = suggest(model(llm), train)
    assert response["transcript"]["reply"] == "(refusal) I will not help with that."
    assert "the model refused" in response["fallback_reason"]


def test_no_call_no_transcript(train: Case) -> None:
    (response,) = suggest(OpenAIBackend(base_url="http://127.0.0.1:9/v1"), train)  # no model name: never called
    assert response["transcript"] is None and "DAIFU_OPENAI_MODEL" in response["fallback_reason"]
    (rules,) = suggest("rules", train)
    assert rules["transcript"] is None


def test_a_long_reply_is_cut_in_the_transcript_and_says_so(train: Case) -> None:
    thought = "<think>" + "Let me think about the shapes again. " * 1500 + "</think>\n"  # a reasoning model, ~55 KB
    with FakeLLM([thought + json.dumps(answer(train, flat_edit(train)))]) as llm:
        (response,) = suggest(model(llm), train)
    transcript = response["transcript"]
    assert transcript["cut"] is True and len(transcript["reply"]) == MAX_REPLY_TEXT
    assert transcript["reply"].startswith("<think>Let me think")
    assert any(s["origin"] == "model" for s in response["suggestions"])  # the reply itself was read whole


def test_a_question_and_the_conversation_go_in_the_one_call_and_the_answer_comes_back(train: Case) -> None:
    def reply(body: dict[str, Any]) -> str:
        return json.dumps(answer(train, flat_edit(train)) | {"answer": "The images keep their 8x8 grid: flatten them."})

    earlier = Exchange(
        question="why does the first layer fail?",
        answer="The images are 4-D. (Diagnosis: [tensor_mismatch] 4-D images.)",
        tried=[Attempt(decision="skip: leave the batch out", outcome="tried on a copy of the run: raised NameError")],
    )
    with FakeLLM(reply) as llm:
        (response,) = suggest(
            model(llm),
            train,
            question="and what shape should they have?",
            conversation=[earlier.model_dump()],
        )
    assert len(llm.requests) == 1
    prompt = llm.requests[0]["messages"][-1]["content"]
    assert "Q: why does the first layer fail?" in prompt
    assert "A: The images are 4-D. (Diagnosis: [tensor_mismatch] 4-D images.)" in prompt
    assert "then: skip: leave the batch out -> tried on a copy of the run: raised NameError" in prompt
    assert "The person at the console now asks: and what shape should they have?" in prompt
    assert prompt.index("Paused at line") < prompt.index("Q: why") < prompt.index("now asks")  # the crash once, first
    schema = llm.requests[0]["response_format"]["json_schema"]["schema"]
    assert "answer" in schema["required"] and schema["properties"]["answer"] == {"type": "string"}
    assert response["answer"] == "The model (test-model) says, not DaiFu: The images keep their 8x8 grid: flatten them."
    assert response["backend_used"] == "openai"


def test_without_a_question_the_schema_asks_for_no_answer(train: Case) -> None:
    with FakeLLM([json.dumps(answer(train, flat_edit(train)) | {"answer": "unasked"})]) as llm:
        (response,) = suggest(model(llm), train)
    assert "answer" not in llm.requests[0]["response_format"]["json_schema"]["schema"]["properties"]
    assert "now asks" not in llm.requests[0]["messages"][-1]["content"]
    assert response["answer"] is None


def test_a_reply_without_the_answer_says_so(train: Case) -> None:
    with FakeLLM([json.dumps(answer(train, flat_edit(train)))]) as llm:
        (response,) = suggest(model(llm), train, question="why?")
    assert response["answer"] is None
    assert any("holds no `answer`" in note for note in response["notes"])


def test_each_question_is_its_own_computation_in_the_cache(train: Case) -> None:
    with FakeLLM([json.dumps(answer(train, flat_edit(train)) | {"answer": "yes"})]) as llm:
        responses = suggest(
            model(llm),
            train,
            cache_seconds=30,
            bodies=[{}, {}, {"question": "a?"}, {"question": "b?"}, {"question": "b?"}, {"question": "b?",
                                                                                      "conversation": [{}]}],
        )
    assert len(llm.requests) == 4  # the repeated plain request and the repeated "b?" come from the cache
    assert [r["cached"] for r in responses] == [False, True, False, False, True, False]


def test_the_rules_engine_says_it_answers_no_questions(train: Case) -> None:
    (response,) = suggest("rules", train, question="why is it 4-D?")
    assert response["answer"] == NO_QUESTIONS and response["suggestions"]
    (plain,) = suggest("rules", train)
    assert plain["answer"] is None


def test_a_failed_model_call_answers_the_question_with_the_rules_line(train: Case) -> None:
    with FakeLLM([Reply(status=500, error={"error": {"message": "boom"}})]) as llm:
        (response,) = suggest(model(llm), train, question="why?", deadline_s=60)  # the 500 ends it, not the deadline
    assert response["answer"] == NO_QUESTIONS and response["backend_used"] == "rules"
    assert "HTTP 500: boom" in response["fallback_reason"]
    assert response["transcript"]["reply"] is None and response["transcript"]["messages"][-1]["content"]


def test_questions_and_conversations_are_bounded(train: Case) -> None:
    url, stop = start_in_thread("rules")
    try:
        report = train.report.model_dump(mode="json")
        long = httpx.post(f"{url}/v1/suggest", json={"report": report, "question": "x" * 2001}, timeout=30)
        many = httpx.post(f"{url}/v1/suggest", json={"report": report, "conversation": [{}] * 21}, timeout=30)
    finally:
        stop()
    assert long.status_code == 422 and "question" in long.json()["message"]
    assert many.status_code == 422 and "conversation" in many.json()["message"]


def test_daifu_report_shows_the_exact_prompt_and_reply(
    train: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The runtime asks the service, the service the fake model; `daifu report 1` prints the call."""
    raw = json.dumps(answer(train, flat_edit(train)))
    with FakeLLM([Reply(content=raw, usage=(900, 40))]) as llm:
        url, stop = start_in_thread(model(llm))
        try:
            daifu.configure(mode="automatic", approve="auto", bot_url=url, workspace=tmp_path / "ws")
            assert daifu.transform(fresh(train.function))(*train.make_args()) == 6
        finally:
            stop()
    capsys.readouterr()
    assert daifu_main(["report", "--record", str(tmp_path / "ws"), "1"]) == 0
    shown = capsys.readouterr().out
    crash_report = shown.index("The crash report sent to the repair bot:")
    call = shown.index("The model call behind the answer (model test-model, 900 tokens in, 40 out):")
    assert crash_report < call
    sent = llm.requests[0]["messages"]
    assert "--- system ---\n" + sent[0]["content"] + "\n" in shown
    assert "--- user ---\n" + sent[1]["content"] in shown  # every line of the prompt, unchanged
    assert "--- reply (finish_reason: stop) ---\n" + raw + "\n" in shown
    assert "--- how the reply was read ---\n  the model answered in" in shown
