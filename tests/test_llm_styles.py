"""Every reply style of `tests/replystyles.py` through the real service, over HTTP, against a fake model server.

For each style: the suggestions that come out, their origin, the notes and fallback reason, the
number of model calls; and, for the model's best suggestion, that applying it as the runtime
would really completes the crashed work. Then what a style alone cannot show: a `Retry-After`
honoured (read from the fake server's request times), a server that rejects structured outputs
learnt once, a model's words on the terminal of a vaccinated run.
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

import inspect
import json
import textwrap

import httpx

import daifu
from daifu.state import RUN
from repairbot.backends.openai import OpenAIBackend, forget_capabilities
from repairbot.protocol import SuggestResponse
from repairbot.server import start_in_thread
from tests import llmabove
from tests.copies import fresh
from tests.fakellm import FakeLLM, Reply, openai_error
from tests.llmcases import Case, cases
from tests.replystyles import INJECTED, STYLES, TODAYS, Style, answer, flat_edit


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


@pytest.mark.parametrize("style", STYLES + TODAYS, ids=[s.name for s in STYLES + TODAYS])
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


def test_a_rate_limit_is_retried_after_the_delay_its_retry_after_asks(crashes: dict[str, Case]) -> None:
    """A 429 with `Retry-After: 2` (OpenAI's and vLLM's rate limits send it): the retry comes 2 s later, not 1."""
    case = crashes["train"]
    limited = Reply(status=429, error=openai_error("Rate limit reached", "rate_limit"), headers={"Retry-After": "2"})
    with FakeLLM([limited, json.dumps(answer(case, flat_edit(case)))]) as llm:
        response = ask(llm, case)
    assert len(llm.times) == 2 and llm.times[1] - llm.times[0] >= 1.9, llm.times  # the fake server's own clock
    assert response["backend_used"] == "openai"
    assert "retried once after HTTP 429, 2 s later as its Retry-After asked" in response["notes"]


def test_a_retry_after_beyond_the_deadline_is_named_at_once(crashes: dict[str, Case]) -> None:
    case = crashes["train"]
    limited = Reply(status=429, error=openai_error("Rate limit reached", "rate_limit"), headers={"Retry-After": "120"})
    with FakeLLM([limited, json.dumps(answer(case, flat_edit(case)))]) as llm:
        response = ask(llm, case)
    assert len(llm.requests) == 1  # the service's deadline (45 s) leaves no room for the wait
    assert "its Retry-After asks for 120 s, more than the" in response["fallback_reason"]


def test_a_400_to_structured_output_that_names_nothing_is_asked_again_without_it(crashes: dict[str, Case]) -> None:
    """A gateway answering 400 with its own page to `response_format` (it names no parameter): once more
    without it, then remembered for the server, and said."""
    case = crashes["train"]
    good = "```json\n" + json.dumps(answer(case, flat_edit(case))) + "\n```"

    def gateway(body: dict[str, Any]) -> Reply | str:
        if "response_format" in body:
            return Reply(status=400, body="<html><body><h1>400 Bad Request</h1></body></html>", media_type="text/html")
        return good

    with FakeLLM(gateway) as llm:
        first = ask(llm, case)
        second = ask(llm, case)
    assert len(llm.requests) == 3 and "response_format" not in llm.requests[1]
    assert "response_format" not in llm.requests[2]  # remembered: the next crash pays no extra request
    assert first["backend_used"] == "openai" and any(s["origin"] == "model" for s in first["suggestions"])
    notes = "\n".join(first["notes"])
    assert "answered HTTP 400" in notes and "asked once more without it" in notes
    assert "is asked without `response_format` from now on" in notes
    assert not any("response_format" in n for n in second["notes"])


def test_a_500_that_names_response_format_is_learnt_as_a_rejection(crashes: dict[str, Case]) -> None:
    """A llama.cpp fork (ikawrakow/ik_llama.cpp issue 778) answers an unsupported `json_schema` with HTTP 500."""
    case = crashes["train"]
    good = json.dumps(answer(case, flat_edit(case)))
    message = 'response_format type must be one of "text" or "json_object", but got: json_schema'

    def fork(body: dict[str, Any]) -> Reply | str:
        if (body.get("response_format") or {}).get("type") == "json_schema":
            return Reply(status=500, error={"error": {"code": 500, "message": message, "type": "server_error"}})
        return good

    with FakeLLM(fork) as llm:
        response = ask(llm, case)
    assert len(llm.requests) == 2 and llm.requests[1]["response_format"] == {"type": "json_object"}
    assert response["backend_used"] == "openai"
    assert any("rejected response_format `json_schema`" in n for n in response["notes"])


def test_the_models_words_on_the_terminal_are_marked_and_not_run(
    crashes: dict[str, Case], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A vaccinated run whose model obeyed an injection: the terminal gives the diagnosis as the model's,
    saying nothing in it was run, before the command."""
    case = crashes["train"]
    reply = json.dumps(answer(case, flat_edit(case)) | {"diagnosis": {"category": "unknown", "explanation": INJECTED}})
    with FakeLLM([reply]) as llm:
        url, stop = start_in_thread(OpenAIBackend(base_url=llm.url, model="test-model"))
        try:
            daifu.configure(mode="automatic", approve="auto", bot_url=url, workspace=tmp_path / "ws")
            assert daifu.transform(fresh(case.function))(*case.make_args()) == 6
        finally:
            stop()
    line = next(line for line in capfd.readouterr().err.splitlines() if "repair bot (openai" in line)
    assert "The model (test-model) says, not DaiFu (nothing in it was run): The checkpoint" in line, line
    assert line.index("nothing in it was run") < line.index("curl"), line


def _above(program: Any, tmp_path: Path, *args: Any) -> tuple[Any, FakeLLM]:
    """Run `program` vaccinated, automatic, against a model whose answer edits the line above the crash;
    the result, and the fake model server."""
    source, first = inspect.getsourcelines(program)
    line = first + next(i for i, text in enumerate(source) if llmabove.FIX[0] in text)
    crash_line = first + next(i for i, text in enumerate(source) if ".mean()" in text)
    edit = {
        "kind": "edit",
        "function": program.__name__,
        "start_line": line,
        "end_line": line,
        "new_code": "        " + llmabove.FIX[1],
        "code": None,
        "explanation": "Make the values floating point, so that their mean can be taken.",
        "confidence": 0.95,
    }
    diagnosis = {"category": "dtype", "culprit_function": program.__name__, "culprit_line": line, "explanation": "x"}
    with FakeLLM([json.dumps({"diagnosis": diagnosis, "suggestions": [edit]})]) as llm:
        url, stop = start_in_thread(OpenAIBackend(base_url=llm.url, model="test-model"))
        try:
            daifu.configure(mode="automatic", approve="auto", bot_url=url, workspace=tmp_path / "ws")
            result = daifu.transform(fresh(program))(*args)
        finally:
            stop()
    assert f">>{crash_line:>4}" in llm.prompts[0]
    return result, llm


def _fixed(program: Any) -> Any:
    namespace = dict(program.__globals__)
    exec(textwrap.dedent(inspect.getsource(program)).replace(*llmabove.FIX), namespace)
    return namespace[program.__name__]


def test_the_prompt_says_an_edit_above_the_crash_reruns_the_lines_between(tmp_path: Path) -> None:
    """The prompt and the runtime agree: the model's edit of the line above runs, the run resumes there, and
    it ends as the fixed program does (the statements between only compute)."""
    result, llm = _above(llmabove.average, tmp_path, llmabove.BATCHES)
    assert result == _fixed(llmabove.average)(llmabove.BATCHES) == [4.0, 11.0, 17.0]
    prompt = llm.prompts[0]
    assert "earlier lines do not" not in prompt
    assert "when the edit changes a line above line" in prompt and "runs a second time" in prompt
    repairs = [r for r in RUN.history if r.get("function") == "average"]
    assert repairs and repairs[-1]["decision"].startswith("Surgery")


def test_a_repair_that_would_append_a_second_time_needs_a_person(tmp_path: Path,
                                                                 capfd: pytest.CaptureFixture[str]) -> None:
    """An edit above the crash with an append between: unattended, it is not applied (the append would run a
    second time), the terminal says which statement and why, the record names the statements that would run
    again, and the run ends with the original exception, each batch's append run once (a last resort may have
    passed over the first batch, within the budget of what a site may pass over)."""
    seen: list[int] = []
    with pytest.raises(RuntimeError, match="mean"):
        _above(llmabove.average_counting, tmp_path, llmabove.BATCHES, seen)
    assert seen == [len(batch) for batch in llmabove.BATCHES[: len(seen)]]  # each batch's append ran once
    source, first = inspect.getsourcelines(llmabove.average_counting)
    append = first + next(i for i, text in enumerate(source) if "seen.append" in text)
    err = capfd.readouterr().err
    said = next(line for line in err.splitlines() if "needs a person" in line)
    assert "resumes above the crash" in said, said  # the line is cut to the width; the record has the rest
    rows = [json.loads(line) for line in (tmp_path / "ws" / "repairbot_suggestions.jsonl").read_text().splitlines()]
    model_rows = [s for s in rows[0]["suggestions"] if s.get("origin") == "model"]
    assert any(f"line {append} `seen.append(len(batch))`" in r for r in model_rows[0]["reruns"])
    assert any("seen.append" in why for why in model_rows[0]["needs_person"])
