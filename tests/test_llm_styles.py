"""Every reply style of `tests/replystyles.py` through the real service, over HTTP, against a fake model server.

For each style: the suggestions that come out, their origin, the notes and fallback reason, the
number of model calls; and, for the model's best suggestion, that applying it as the runtime
would really completes the crashed work.
"""

# ruff: noqa: E402
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.extras import BOT

for _package in (*BOT, "openai"):
    pytest.importorskip(_package)

import httpx

import daifu
from daifu.state import RUN
from repairbot.backends.openai import OpenAIBackend, forget_capabilities
from repairbot.protocol import SuggestResponse
from repairbot.server import start_in_thread
from tests.copies import fresh
from tests.fakellm import FakeLLM
from tests.llmcases import Case, cases
from tests.replystyles import STYLES, Style


@pytest.fixture(scope="module")
def crashes() -> dict[str, Case]:
    return cases()


@pytest.fixture(autouse=True)
def fresh_capabilities() -> Iterator[None]:
    forget_capabilities()
    yield
    forget_capabilities()


def ask(llm: FakeLLM, case: Case, **backend: Any) -> dict[str, Any]:
    """POST the crash to a real service whose openai backend talks to `llm`."""
    url, stop = start_in_thread(OpenAIBackend(base_url=llm.url, model="test-model", **backend), cache_seconds=0)
    try:
        reply = httpx.post(f"{url}/v1/suggest", json={"report": case.report.model_dump(mode="json")}, timeout=30)
    finally:
        stop()
    assert reply.status_code == 200, reply.text
    SuggestResponse.model_validate(reply.json())  # the wire format clients read
    return dict(reply.json())


@pytest.mark.parametrize("style", STYLES, ids=[s.name for s in STYLES])
def test_reply_style(style: Style, crashes: dict[str, Case]) -> None:
    case = crashes[style.case]
    with FakeLLM(style.reply(case), rejects=style.rejects) as llm:
        response = ask(llm, case)
    expect = style.expect
    notes = "\n".join(response["notes"])
    model = [s for s in response["suggestions"] if s["origin"] == "model"]
    assert len(llm.requests) == expect.requests
    if expect.kind is None:
        assert not model, model
        assert expect.fallback in (response["fallback_reason"] or ""), response["fallback_reason"]
    else:
        assert response["fallback_reason"] is None, response["fallback_reason"]
        assert response["backend_used"] == "openai"
        best = SuggestResponse.model_validate(response).suggestions[response["suggestions"].index(model[0])]
        assert best.kind == expect.kind, model
        assert case.accepted(best).ok, case.accepted(best)  # the client's own checks would let it through
        assert case.fixes(best) is expect.fixes, best.code
    if expect.note:
        assert expect.note in notes, notes
    if style.check:
        style.check(response, case)
    assert response["suggestions"], "never worse than offline: some repair is always offered when one exists"


def test_plain_text_is_remembered_for_the_next_crash(crashes: dict[str, Case]) -> None:
    style = next(s for s in STYLES if s.name == "json_object_rejected")
    case = crashes["train"]
    with FakeLLM(style.reply(case), rejects=("json_schema", "json_object")) as llm:
        ask(llm, case)
        first = len(llm.requests)
        second = ask(llm, case)
    assert first == 3 and len(llm.requests) == 4
    assert "response_format" not in llm.requests[-1]
    assert second["notes"] == [n for n in second["notes"] if "rejected" not in n]  # nothing to learn any more
    assert any(s["origin"] == "model" for s in second["suggestions"])


@pytest.mark.parametrize("style_name", ["numbered_lines", "unimported_module"])
def test_a_vaccinated_run_is_repaired_by_the_models_answer(
    style_name: str, crashes: dict[str, Case], tmp_path: Path
) -> None:
    """The whole path: the runtime asks the service, the service the fake model, and the run completes."""
    style = next(s for s in STYLES if s.name == style_name)
    case = crashes[style.case]
    with FakeLLM(style.reply(case)) as llm:
        url, stop = start_in_thread(OpenAIBackend(base_url=llm.url, model="test-model"))
        try:
            daifu.configure(mode="automatic", approve="auto", bot_url=url, workspace=tmp_path / "ws")
            vaccinated = daifu.transform(fresh(case.function))
            result = vaccinated(*case.make_args())
        finally:
            stop()
    assert len(llm.requests) == 1
    repairs = [entry for entry in RUN.history if entry.get("function") == case.function.__qualname__]
    assert repairs and repairs[-1]["decision"].startswith(style.expect.kind.capitalize() if style.expect.kind else "")
    assert result == (6 if style.case == "train" else 2)  # every step taken: 2 epochs of 3 batches, or 2 saves
