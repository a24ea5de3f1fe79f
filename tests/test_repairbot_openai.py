"""The `openai` backend against a real local server speaking the Chat Completions wire format."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from collections.abc import Iterator

import httpx
import pytest

from repairbot.protocol import CrashReport
from repairbot.openai_backend import OpenAIBackend
from repairbot.server import serve_in_thread, start_in_thread
from tests.botfixtures import FakeChatServer, report_of

KEY = "sk-test-key-never-shown"

DIAGNOSIS = {
    "category": "api_misuse",
    "explanation": "n is a float.",
    "culprit": {"function": "halves", "filename": "f.py", "lineno": 2, "reason": "it slices"},
}


def halves(xs):
    n = len(xs) / 2
    return xs[:n]


def good_reply(prompt: str) -> str:
    if "Find the root cause" in prompt:
        return json.dumps(DIAGNOSIS)
    if "Propose a surgery" in prompt:
        code = "def halves(xs):\n    n = len(xs) // 2\n    return xs[:n]\n"
        return json.dumps(
            {"suggestions": [{"kind": "surgery", "code": code, "explanation": "floor", "confidence": 0.9}]}
        )
    return json.dumps(
        {"suggestions": [{"kind": "action", "code": "n = int(n)", "explanation": "int", "confidence": 0.5}]}
    )


@pytest.fixture
def report() -> CrashReport:
    return report_of(halves, [1, 2, 3, 4])


@pytest.fixture
def chat() -> Iterator[FakeChatServer]:
    server = FakeChatServer(good_reply)
    url, stop = serve_in_thread(server.app)
    server.url = url + "/v1"  # type: ignore[attr-defined]
    yield server
    stop()


def backend(chat: FakeChatServer, **options: Any) -> OpenAIBackend:
    options.setdefault("max_retries", 0)
    return OpenAIBackend(api_key=KEY, base_url=chat.url, model="test-model", **options)  # type: ignore[attr-defined]


def test_good_json_gives_the_models_suggestions(chat: FakeChatServer, report: CrashReport) -> None:
    answer = backend(chat).suggest(report)
    assert answer.backend_used == "openai" and answer.fallback_reason is None
    assert [s.kind for s in answer.suggestions] == ["surgery", "action"]
    assert answer.diagnosis.explanation == "n is a float."
    assert len(chat.prompts) == 3 and chat.authorizations[0] == f"Bearer {KEY}"
    assert ">>" in chat.prompts[0] and "return xs[:n]" in chat.prompts[0]  # the faulty line is marked


def test_reply_that_is_not_json_falls_back_to_rules(chat: FakeChatServer, report: CrashReport) -> None:
    chat.script = lambda prompt: "Sure! Here is my analysis: n is a float."
    answer = backend(chat).suggest(report)
    assert answer.backend_used == "rules"
    assert "not JSON" in (answer.fallback_reason or "")
    assert answer.suggestions and answer.suggestions[0].kind == "surgery"  # the rules engine's


def test_reply_off_the_schema_falls_back_with_the_field_named(chat: FakeChatServer, report: CrashReport) -> None:
    chat.script = lambda prompt: json.dumps({"category": "api_misuse", "explanation": "x"})
    answer = backend(chat).diagnose(report)
    assert answer.backend_used == "rules" and "culprit" in (answer.fallback_reason or "")


def test_rate_limit_is_retried_with_back_off(chat: FakeChatServer, report: CrashReport) -> None:
    replies = iter([(429, {"error": {"message": "slow down", "type": "rate_limit"}})])
    chat.script = lambda prompt: next(replies, None) or good_reply(prompt)
    answer = backend(chat, max_retries=2).suggest(report)
    assert answer.backend_used == "openai" and answer.fallback_reason is None
    assert len(chat.prompts) == 4  # one 429, then the three prompts


def test_persistent_server_errors_fall_back(chat: FakeChatServer, report: CrashReport) -> None:
    chat.script = lambda prompt: (503, {"error": {"message": "down"}})
    answer = backend(chat, max_retries=1).suggest(report)
    assert answer.backend_used == "rules" and "HTTP 503" in (answer.fallback_reason or "")
    assert len(chat.prompts) == 2


def test_timeout_falls_back(chat: FakeChatServer, report: CrashReport) -> None:
    chat.script = lambda prompt: 1.0
    answer = backend(chat, timeout=0.2).diagnose(report)
    assert answer.backend_used == "rules" and "timed out" in (answer.fallback_reason or "")


def test_missing_key_falls_back_without_a_request(
    chat: FakeChatServer, report: CrashReport, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    answer = OpenAIBackend(base_url=chat.url).suggest(report)  # type: ignore[attr-defined]
    assert answer.backend_used == "rules" and "OPENAI_API_KEY" in (answer.fallback_reason or "")
    assert chat.prompts == []


def test_missing_prompt_folder_falls_back(
    chat: FakeChatServer, report: CrashReport, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DAIFU_PROMPTS_DIR", str(tmp_path / "nowhere"))
    answer = backend(chat).suggest(report)
    assert answer.backend_used == "rules" and "cannot be read" in (answer.fallback_reason or "")


def test_environment_configures_the_backend(
    chat: FakeChatServer, report: CrashReport, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("DAIFU_OPENAI_BASE_URL", chat.url)  # type: ignore[attr-defined]
    monkeypatch.setenv("DAIFU_OPENAI_MODEL", "local-model")
    assert "local-model" in OpenAIBackend().info().detail
    assert OpenAIBackend(max_retries=0).diagnose(report).backend_used == "openai"


def test_service_calls_the_model_once_for_concurrent_identical_reports(
    chat: FakeChatServer, report: CrashReport
) -> None:
    url, stop = start_in_thread(backend(chat))
    try:
        body = {"report": report.model_dump(mode="json")}
        with httpx.Client(timeout=30) as client, ThreadPoolExecutor(8) as pool:
            replies = list(pool.map(lambda _: client.post(f"{url}/v1/suggest", json=body), range(8)))
    finally:
        stop()
    assert {r.status_code for r in replies} == {200}
    assert len(chat.prompts) == 3
    assert sum(not r.json()["cached"] for r in replies) == 1
    assert all(KEY not in r.text for r in replies)
