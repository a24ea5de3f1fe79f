"""The repair bot's HTTP service, on a real uvicorn server on 127.0.0.1."""

# ruff: noqa: E402
from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

import httpx

from repairbot.protocol import fingerprint
from repairbot.server import start_in_thread
from tests.botfixtures import report_of

TOKEN = "test-token-123"


def halves(xs):
    n = len(xs) / 2
    return xs[:n]


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    url, stop = start_in_thread(token=TOKEN, max_body=64 * 1024)
    yield url
    stop()


@pytest.fixture
def client(url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10) as client:
        yield client


@pytest.fixture(scope="module")
def body() -> dict:
    return {"report": report_of(halves, [1, 2, 3, 4]).model_dump(mode="json")}


def test_health_needs_no_token(url: str) -> None:
    reply = httpx.get(f"{url}/healthz").json()
    assert reply == {"status": "ok", "backend": "rules", "available": True, "detail": "embedded, offline, deterministic"}


def test_suggest_answers_with_ranked_suggestions(client: httpx.Client, body: dict) -> None:
    reply = client.post("/v1/suggest", json=body).json()
    assert reply["backend_used"] == "rules" and reply["fallback_reason"] is None
    assert reply["diagnosis"]["category"] == "api_misuse"
    confidences = [s["confidence"] for s in reply["suggestions"]]
    assert confidences == sorted(confidences, reverse=True) and reply["suggestions"][0]["kind"] == "surgery"


def test_diagnose_names_the_culprit(client: httpx.Client, body: dict) -> None:
    reply = client.post("/v1/diagnose", json=body).json()
    assert reply["diagnosis"]["culprit"]["function"] == "halves"
    assert "TypeError" in reply["diagnosis"]["explanation"]
    assert reply["fingerprint"] == fingerprint(report_of(halves, [1, 2, 3, 4]))


def test_identical_reports_are_answered_from_the_cache(client: httpx.Client) -> None:
    fresh = {"report": report_of(halves, [1, 2]).model_dump(mode="json")}
    fresh["report"]["function"]["lineno"] += 1000  # a site no other test asked about
    assert client.post("/v1/suggest", json=fresh).json()["cached"] is False
    assert client.post("/v1/suggest", json=fresh).json()["cached"] is True


def test_backends_are_listed(client: httpx.Client) -> None:
    reply = client.get("/v1/backends").json()
    assert reply["default"] == "rules"
    assert {b["name"]: b["available"] for b in reply["backends"]}["rules"] is True


@pytest.mark.parametrize("header", [None, "Bearer wrong", f"Basic {TOKEN}"])
def test_missing_or_wrong_token_is_refused(url: str, body: dict, header: str | None) -> None:
    headers = {"Authorization": header} if header else {}
    reply = httpx.post(f"{url}/v1/suggest", json=body, headers=headers)
    assert reply.status_code == 401 and reply.headers["www-authenticate"] == "Bearer"


def test_malformed_json_is_422_with_a_message(client: httpx.Client) -> None:
    reply = client.post("/v1/suggest", content=b'{"report": ', headers={"Content-Type": "application/json"})
    assert reply.status_code == 422 and "Malformed request" in reply.json()["message"]


def test_report_missing_fields_is_422_naming_them(client: httpx.Client, body: dict) -> None:
    broken = {"report": {k: v for k, v in body["report"].items() if k != "exception"}}
    reply = client.post("/v1/diagnose", json=broken)
    assert reply.status_code == 422 and "body.report.exception: Field required" in reply.json()["message"]


def test_oversized_body_is_413(client: httpx.Client) -> None:
    reply = client.post("/v1/suggest", content=b"x" * (65 * 1024), headers={"Content-Type": "application/json"})
    assert reply.status_code == 413


def test_oversized_chunked_body_is_413(client: httpx.Client) -> None:
    chunks = (b"x" * 16 * 1024 for _ in range(8))
    reply = client.post("/v1/suggest", content=chunks, headers={"Content-Type": "application/json"})
    assert reply.status_code == 413


def test_unknown_backend_is_400(client: httpx.Client, body: dict) -> None:
    reply = client.post("/v1/suggest", json={**body, "backend": "oracle"})
    assert reply.status_code == 400 and "known backends: rules, openai" in reply.json()["detail"]


def test_openapi_docs_are_served(url: str) -> None:
    assert httpx.get(f"{url}/docs", timeout=60).status_code == 200
    assert "/v1/suggest" in httpx.get(f"{url}/openapi.json", timeout=60).json()["paths"]
