"""The `openai` backend's transport, through the real service, against a fake OpenAI-wire server on 127.0.0.1.

One call per crash and what it carries; what the endpoint rejects, learnt and remembered; the
endpoint's own error messages; retries; the deadline, and the client going away; configuration
for local servers. The reply styles themselves are in `tests/test_llm_styles.py`.
"""

# ruff: noqa: E402
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.extras import BOT

for _package in (*BOT, "openai"):
    pytest.importorskip(_package)

import httpx

from repairbot.protocol import Attempt, CrashReport
from repairbot.backends.openai import OpenAIBackend, forget_capabilities
from repairbot import reach
from repairbot.server import start_in_thread
from tests.fakellm import FakeLLM, Reply, openai_error
from tests.llmcases import Case, cases
from tests.replystyles import answer, diagnosis, flat_edit
from tests.terminal import child_env

KEY = "sk-test-key-never-shown"


@pytest.fixture(scope="module")
def crashes() -> dict[str, Case]:
    return cases()


@pytest.fixture
def train(crashes: dict[str, Case]) -> Case:
    return crashes["train"]


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("OPENAI_API_KEY", "DAIFU_OPENAI_API_KEY", "OPENAI_BASE_URL", "DAIFU_OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("DAIFU_OPENAI_MODEL", raising=False)
    monkeypatch.delenv("DAIFU_BOT_DEADLINE", raising=False)
    forget_capabilities()
    reach.forget()
    yield
    forget_capabilities()


def good(case: Case) -> str:
    return json.dumps(answer(case, flat_edit(case)))


def post(
    backend: OpenAIBackend, report: CrashReport, path: str = "suggest", timeout: float = 30, **options: Any
) -> httpx.Response:
    deadline = options.pop("deadline_s", None)
    url, stop = start_in_thread(backend, cache_seconds=0, **options)
    body: dict[str, Any] = {"report": report.model_dump(mode="json")}
    if deadline is not None:
        body["deadline_s"] = deadline
    try:
        return httpx.post(f"{url}/v1/{path}", json=body, timeout=timeout)
    finally:
        stop()


def test_one_call_carries_the_crash_the_schema_and_a_token_limit(train: Case) -> None:
    with FakeLLM([good(train)]) as llm:
        reply = post(OpenAIBackend(base_url=llm.url, model="test-model", api_key=KEY), train.report).json()
    assert len(llm.requests) == 1
    sent = llm.requests[0]
    prompt = sent["messages"][-1]["content"]
    line = train.report.function.lineno
    assert f">>{line:>4}              logits = model(images)" in prompt  # the listing, in file line numbers
    assert "images: Tensor shape=(8, 1, 8, 8)" in prompt and "layers 0: 64->32" in prompt  # values and facts
    assert "no line before it does" in prompt and "keep their old values" in prompt  # resume and skip semantics
    assert "DaiFu's offline rules say (tensor_mismatch)" in prompt
    assert sent["response_format"]["type"] == "json_schema" and sent["response_format"]["json_schema"]["strict"]
    assert sent["max_tokens"] == 1200 and sent["temperature"] == 0
    assert llm.headers[0]["authorization"] == f"Bearer {KEY}"
    assert reply["backend_used"] == "openai" and KEY not in json.dumps(reply)
    assert [(s["origin"], s["kind"]) for s in reply["suggestions"]][:1] == [("model", "surgery")]
    assert [s["kind"] for s in reply["suggestions"] if s["origin"] == "rules"] == ["skip_iteration"]  # the rules
    # engine's flatten is the same repair as the model's; its last resort (site_control) is kept behind it


def test_the_callee_and_past_attempts_are_in_the_prompt(crashes: dict[str, Case]) -> None:
    case = crashes["deep"]
    report = case.report.model_copy(deep=True)
    report.tried = [Attempt(decision="Retry()", outcome="raised RuntimeError again at line 117")]
    with FakeLLM(["{}"]) as llm:
        post(OpenAIBackend(base_url=llm.url, model="test-model"), report)
    prompt = llm.prompts[0]
    callee = report.frames[-1].lineno
    assert f">>{callee:>4}      return features / features.norm(dim=1)" in prompt
    assert "Live values in `normalise`:\n  features: Tensor shape=(8, 32)" in prompt
    assert "Already tried at this line" in prompt and "Retry() -> raised RuntimeError again" in prompt


def test_a_loopback_server_needs_no_key_and_a_remote_one_does(train: Case) -> None:
    with FakeLLM([good(train)]) as llm:
        local = OpenAIBackend(base_url=llm.url, model="test-model")
        assert local.info().available and post(local, train.report).json()["backend_used"] == "openai"
        assert llm.headers[0]["authorization"].startswith("Bearer daifu-local")
    remote = OpenAIBackend(base_url="https://llm.example.invalid/v1", model="m")
    assert not remote.info().available and "OPENAI_API_KEY" in remote.info().detail
    answer = remote.suggest(train.report)
    assert answer.backend_used == "rules" and "OPENAI_API_KEY" in (answer.fallback_reason or "")


def test_a_missing_model_name_is_a_clear_error(train: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeLLM([good(train)]) as llm:
        monkeypatch.setenv("DAIFU_OPENAI_BASE_URL", llm.url)
        backend = OpenAIBackend()
        url, stop = start_in_thread(backend)
        try:
            listed = httpx.get(f"{url}/v1/backends").json()["backends"]
        finally:
            stop()
        reply = backend.suggest(train.report)
    openai_info = next(b for b in listed if b["name"] == "openai")
    assert not openai_info["available"] and "DAIFU_OPENAI_MODEL is not set" in openai_info["detail"]
    assert "DAIFU_OPENAI_MODEL" in (reply.fallback_reason or "") and llm.requests == []


def test_serve_refuses_to_start_an_openai_backend_without_a_model(tmp_path: Path) -> None:
    env = child_env(tmp_path, DAIFU_OPENAI_BASE_URL="http://127.0.0.1:9/v1")
    done = subprocess.run(
        [sys.executable, "-m", "daifu", "serve", "--backend", "openai", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2 and "set it to the name of the model" in done.stderr, done.stderr


def health(backend: OpenAIBackend) -> dict[str, Any]:
    url, stop = start_in_thread(backend)
    try:
        return httpx.get(f"{url}/healthz", timeout=30).json()  # type: ignore[no-any-return]
    finally:
        stop()


def test_health_says_an_unreachable_model_endpoint_is_unavailable() -> None:
    reply = health(OpenAIBackend(base_url="http://127.0.0.1:9/v1", model="test-model"))
    assert reply["status"] == "degraded" and reply["available"] is False, reply
    assert reply["detail"].startswith("model test-model at http://127.0.0.1:9/v1: unreachable: cannot connect to "
                                      "127.0.0.1:9"), reply
    with FakeLLM([good(cases()["train"])]) as llm:
        reply = health(OpenAIBackend(base_url=llm.url, model="test-model"))
    assert reply == {"status": "ok", "backend": "openai", "available": True,
                     "detail": f"model test-model at {llm.url}"}, reply


def test_serve_names_the_backend_and_its_model_and_starts_though_the_endpoint_is_down(tmp_path: Path) -> None:
    env = child_env(tmp_path, DAIFU_OPENAI_BASE_URL="http://127.0.0.1:9/v1", DAIFU_OPENAI_MODEL="llama3.1:8b")
    server = subprocess.Popen([sys.executable, "-m", "daifu", "serve", "--backend", "openai", "--port", "0"],
                              env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    try:
        said = ""
        assert server.stdout is not None
        while "Application startup complete" not in said and server.poll() is None:
            said += server.stdout.readline()
    finally:
        server.send_signal(signal.SIGINT)
        said += server.communicate(timeout=60)[0]
    assert ("Backend openai: model llama3.1:8b at http://127.0.0.1:9/v1: unreachable: cannot connect to 127.0.0.1:9"
            in said), said
    assert "until it answers, crashes are answered by the rules engine" in said and server.returncode == 0, said


def test_an_unknown_model_reports_the_servers_own_message(train: Case) -> None:
    with FakeLLM([good(train)], models=("llama3.1:8b",)) as llm:
        reply = post(OpenAIBackend(base_url=llm.url, model="llama3"), train.report).json()
    assert reply["backend_used"] == "rules"
    assert (
        'HTTP 404: model "llama3" not found, try pulling it first (check DAIFU_OPENAI_MODEL)'
        in reply["fallback_reason"]
    )
    assert reply["suggestions"] and reply["suggestions"][0]["origin"] == "rules"


def test_a_base_url_without_v1_is_named(train: Case) -> None:
    with FakeLLM([good(train)]) as llm:
        root = llm.url.removesuffix("/v1")
        reply = post(OpenAIBackend(base_url=root, model="test-model"), train.report).json()
    assert f"set DAIFU_OPENAI_BASE_URL to {root}/v1" in reply["fallback_reason"]


def test_a_rejected_token_parameter_is_learnt(train: Case) -> None:
    def reject_max_tokens(body: dict[str, Any]) -> Reply | str:
        if "max_tokens" in body:
            message = "Unsupported parameter: 'max_tokens' is not supported with this model."
            return Reply(status=400, error=openai_error(message, param="max_tokens"))
        return good(train)

    with FakeLLM(reject_max_tokens) as llm:
        backend = OpenAIBackend(base_url=llm.url, model="test-model")
        first = post(backend, train.report).json()
        post(backend, train.report)
    assert first["backend_used"] == "openai" and any("max_completion_tokens" in n for n in first["notes"])
    assert len(llm.requests) == 3 and llm.requests[-1]["max_completion_tokens"] == 1200


def test_a_rate_limit_is_retried_once(train: Case) -> None:
    replies: list[Reply | str] = [Reply(status=429, error=openai_error("slow down", "rate_limit")), good(train)]
    with FakeLLM(replies) as llm:
        reply = post(OpenAIBackend(base_url=llm.url, model="test-model"), train.report).json()
    assert reply["backend_used"] == "openai" and len(llm.requests) == 2
    assert "retried once after HTTP 429, a moment later" in reply["notes"]


def test_persistent_server_errors_are_retried_once_then_fall_back(train: Case) -> None:
    with FakeLLM([Reply(status=503, error=openai_error("the model is loading", "server_error"))]) as llm:
        reply = post(OpenAIBackend(base_url=llm.url, model="test-model"), train.report).json()
    assert len(llm.requests) == 2
    assert "HTTP 503: the model is loading" in reply["fallback_reason"] and reply["suggestions"]


def test_an_unreachable_endpoint_falls_back_at_once(train: Case) -> None:
    backend = OpenAIBackend(base_url="http://127.0.0.1:9/v1", model="test-model")
    started = time.monotonic()
    answer = backend.suggest(train.report)
    assert answer.backend_used == "rules" and "cannot reach http://127.0.0.1:9/v1" in (answer.fallback_reason or "")
    assert time.monotonic() - started < 30  # one retry, no back-off beyond a second (a busy machine: seconds)


def test_a_trickling_model_gets_the_rules_answer_within_the_requests_deadline(train: Case) -> None:
    with FakeLLM([Reply(content=good(train), trickle=0.3)]) as llm:
        started = time.monotonic()
        reply = post(OpenAIBackend(base_url=llm.url, model="test-model"), train.report, deadline_s=2.0)
        took = time.monotonic() - started
    body = reply.json()
    assert reply.status_code == 200 and body["backend_used"] == "rules"
    assert "no reply within the crash's deadline of 2 s" in body["fallback_reason"]
    assert body["suggestions"][0]["origin"] == "rules"
    assert took < 30.0, took  # the deadline, a server started and stopped (on a busy machine); the trickle: minutes
    assert len(llm.requests) == 1  # no retry once the deadline is spent


def test_the_servers_deadline_bounds_a_silent_model(train: Case) -> None:
    with FakeLLM([Reply(content=good(train), delay=120)]) as llm:
        started = time.monotonic()
        reply = post(OpenAIBackend(base_url=llm.url, model="test-model"), train.report, deadline=1.5).json()
        assert time.monotonic() - started < 60.0  # the deadline, not the model's 120 s
        assert "deadline of 1.5 s" in reply["fallback_reason"]
        waited = time.monotonic()
        while llm.disconnects == 0 and time.monotonic() - waited < 30:  # the model's 120 s would end it too
            time.sleep(0.05)
        assert llm.disconnects == 1  # the call was cancelled and its connection closed


def test_the_model_call_stops_when_the_client_goes_away(train: Case) -> None:
    with FakeLLM([Reply(content=good(train), delay=30)]) as llm:
        url, stop = start_in_thread(OpenAIBackend(base_url=llm.url, model="test-model"), cache_seconds=30)
        try:
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(f"{url}/v1/suggest", json={"report": train.report.model_dump(mode="json")}, timeout=1.0)
            waited = time.monotonic()
            while llm.disconnects == 0 and time.monotonic() - waited < 25:  # the model's 30 s would end it too
                time.sleep(0.05)
            assert llm.disconnects == 1, "the service kept waiting for the model after its client left"
            llm.script([good(train)])
            again = httpx.post(f"{url}/v1/suggest", json={"report": train.report.model_dump(mode="json")}, timeout=10)
        finally:
            stop()
    assert again.json()["cached"] is False and again.json()["backend_used"] == "openai"  # nothing kept


def test_diagnose_makes_the_same_single_call(train: Case) -> None:
    with FakeLLM([good(train)]) as llm:
        reply = post(OpenAIBackend(base_url=llm.url, model="test-model"), train.report, "diagnose").json()
    assert len(llm.requests) == 1 and reply["backend_used"] == "openai"
    assert reply["diagnosis"]["culprit"]["lineno"] == train.report.function.lineno
    assert (
        reply["diagnosis"]["explanation"]
        == f"The model (test-model) says, not DaiFu: {diagnosis(train)['explanation']}"
    )


def test_the_service_calls_the_model_once_for_concurrent_identical_reports(train: Case) -> None:
    with FakeLLM([Reply(content=good(train), delay=0.3)]) as llm:
        url, stop = start_in_thread(OpenAIBackend(base_url=llm.url, model="test-model", api_key=KEY))
        try:
            body = {"report": train.report.model_dump(mode="json")}
            with httpx.Client(timeout=30) as client, ThreadPoolExecutor(8) as pool:
                replies = list(pool.map(lambda _: client.post(f"{url}/v1/suggest", json=body), range(8)))
        finally:
            stop()
    assert {r.status_code for r in replies} == {200}
    assert len(llm.requests) == 1
    assert sum(not r.json()["cached"] for r in replies) == 1
    assert all(KEY not in r.text for r in replies)


def test_missing_prompt_folder_falls_back(train: Case, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAIFU_PROMPTS_DIR", str(tmp_path / "nowhere"))
    with FakeLLM([good(train)]) as llm:
        answer = OpenAIBackend(base_url=llm.url, model="test-model").suggest(train.report)
    assert answer.backend_used == "rules" and "cannot be read" in (answer.fallback_reason or "")
    assert llm.requests == []
