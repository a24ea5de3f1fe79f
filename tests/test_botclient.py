"""The client side: asking the bot, checking its suggestions, and deciding in automatic mode."""

# ruff: noqa: E402
from __future__ import annotations

import json
import socket
import sys
from dataclasses import replace
from pathlib import Path
from collections.abc import Iterator

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

from daifu.core.patch import PatchRefused, patch_function, resolve
from daifu.decide.automatic import decide
from daifu.decide.candidates import to_decision
from daifu.decide.botclient import ask_bot
from daifu.config import Settings
from daifu.core.crash import Crash
from daifu.core.decisions import Action, Decision, Patch, Retry, Skip, SkipIteration, Surgery
from daifu.decide.suggestions import check_action, check_surgery
from daifu.report.build import build_report
from repairbot.protocol import FunctionInfo, fingerprint
from repairbot.protocol import Suggestion
from repairbot.server import start_in_thread
from tests.botfixtures import context_for, crash_from, report_of


def halves(xs):
    n = len(xs) / 2
    for _ in range(1):
        head = xs[:n]
    return head


@pytest.fixture(scope="module")
def bot() -> Iterator[str]:
    url, stop = start_in_thread(token="client-token")
    yield url
    stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_without_url_the_rules_engine_answers_in_process() -> None:
    answer = ask_bot(report_of(halves, [1, 2]), None)
    assert answer.source == "in-process" and answer.backend_used == "rules" and answer.warning is None
    assert answer.suggestions[0].kind == "surgery"


def test_with_url_the_server_answers(bot: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAIFU_REPAIRBOT_TOKEN", "client-token")
    answer = ask_bot(report_of(halves, [1, 2]), bot)
    assert answer.source == bot and answer.warning is None and answer.suggestions


def test_unreachable_server_falls_back_with_a_warning() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    answer = ask_bot(report_of(halves, [1, 2]), url, deadline=2)
    assert answer.source == "in-process" and answer.suggestions
    assert url in (answer.warning or "") and "ConnectError" in (answer.warning or "")


def test_without_httpx_a_bot_url_falls_back_to_the_rules_engine_naming_the_extra(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "httpx", None)  # `import httpx` raises ImportError, as when not installed
    url = f"http://127.0.0.1:{free_port()}"
    answer = ask_bot(report_of(halves, [1, 2]), url, deadline=2)
    assert answer.source == "in-process" and answer.suggestions
    assert url in (answer.warning or "") and "pip install 'daifu[bot]'" in (answer.warning or "")


def test_refused_token_falls_back_naming_the_status(bot: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAIFU_REPAIRBOT_TOKEN", "wrong")
    answer = ask_bot(report_of(halves, [1, 2]), bot)
    assert answer.source == "in-process" and "HTTP 401" in (answer.warning or "")


FUNCTION = FunctionInfo(
    name="halves",
    qualname="halves",
    source="def halves(xs):\n    n = len(xs) / 2\n    for _ in range(1):\n        head = xs[:n]\n    return head\n",
    filename="f.py",
    first_lineno=10,
    lineno=13,
    statement="        head = xs[:n]\n",
    kind="statement",
)


def test_surgery_that_does_not_compile_is_rejected() -> None:
    verdict = check_surgery(FUNCTION.source.replace("xs[:n]", "xs[:n"), FUNCTION)
    assert not verdict and "does not compile" in str(verdict)


def test_surgery_must_keep_name_and_parameters() -> None:
    renamed = FUNCTION.source.replace("def halves(xs)", "def halve(xs, k)")
    assert "renames the function from 'halves' to 'halve'" in str(check_surgery(renamed, FUNCTION))
    widened = FUNCTION.source.replace("def halves(xs)", "def halves(xs, k)")
    assert "changes the parameters" in str(check_surgery(widened, FUNCTION))


def test_surgery_outside_the_crashed_block_needs_approval() -> None:
    wide = FUNCTION.source.replace("len(xs) / 2", "len(xs) // 2")
    assert "outside the block" in str(check_surgery(wide, FUNCTION))
    assert check_surgery(wide, FUNCTION, allow_wide=True).ok
    assert check_surgery(FUNCTION.source.replace("xs[:n]", "xs[:int(n)]"), FUNCTION).ok


def test_surgery_loading_unknown_names_is_rejected() -> None:
    verdict = check_surgery(FUNCTION.source.replace("xs[:n]", "xs[:m]"), FUNCTION, names=set())
    assert "'m'" in str(verdict)


def test_action_that_does_not_compile_is_rejected() -> None:
    assert "does not compile" in str(check_action("x = ("))


def test_suggestions_become_decisions() -> None:
    def make(kind: str, code: str = "") -> Suggestion:
        return Suggestion(kind=kind, code=code, explanation="", confidence=0.5, target="sys.modules['m'].f")

    assert to_decision(make("surgery", "def f(): pass")) == Surgery("def f(): pass")
    assert to_decision(make("action", "x = 1")) == Action("x = 1")
    assert to_decision(make("retry")) == Retry() and to_decision(make("skip")) == Skip()
    assert to_decision(make("skip_iteration")) == SkipIteration()
    code = "    @cache\n    def f(self):\n        return 2\n"
    assert to_decision(make("patch_function", code)) == Patch("sys.modules['m'].f", code)


def helper() -> int:
    return 1


def test_a_patch_swaps_the_code_of_the_named_function_in_place() -> None:
    original = helper.__code__
    try:
        patch_function(resolve(f"{__name__}:helper"), "def helper() -> int:\n    return 2\n")
        assert helper() == 2 and helper.__code__.co_filename.endswith("(patch 1)") is not None
        with pytest.raises(PatchRefused, match="parameters"):
            patch_function(helper, "def helper(x):\n    return x\n")
    finally:
        helper.__code__ = original


def calls_helper(items):
    total = 0
    for item in items:
        total += helper() + item
    return total


def test_a_patch_is_checked_before_anything_is_applied() -> None:
    import daifu
    from tests.copies import fresh

    target, reasons = f"{__name__}:helper", {}

    def policy(crash):
        reasons["fine"] = crash.check(Patch(target, "def helper() -> int:\n    return 2\n"))
        reasons["parameters"] = crash.check(Patch(target, "def helper(x):\n    return x\n"))
        reasons["unknown"] = crash.check(Patch(f"{__name__}:no_such_function", "def no_such_function():\n    pass\n"))
        reasons["syntax"] = crash.check(Patch(target, "def helper(:\n"))
        return daifu.Skip()

    daifu.set_policy(policy)
    assert daifu.transform(fresh(calls_helper))([1, "x", 2]) == 5
    assert helper() == 1  # the checks changed nothing
    assert reasons["fine"] is None
    assert "parameters" in reasons["parameters"] and "no_such_function" in reasons["unknown"]
    assert reasons["syntax"] and "helper" in reasons["syntax"]


def settings(tmp_path: Path, approve: str) -> Settings:
    return Settings(mode="automatic", approve=approve, workspace=tmp_path / "ws")


def deciding(crash: Crash, settings: Settings) -> Decision | None:
    """Automatic mode's decision for `crash`, with no person to ask."""
    return decide(crash, context_for(crash, settings), None)


def test_without_a_trial_auto_applies_only_what_cannot_discard_state(tmp_path: Path) -> None:
    crash = crash_from(halves, [1, 2, 3, 4])  # a crash with no live run: no trial can be made
    decision = deciding(crash, settings(tmp_path, "auto"))
    assert decision == Action("n = int(n)")  # rebinds a plain local; the surgery edits a statement
    assert crash.tried[-1][0] == repr(decision)


def test_a_repair_that_did_not_hold_is_not_offered_again(tmp_path: Path) -> None:
    crash = crash_from(halves, [1, 2, 3, 4])
    first = deciding(crash, settings(tmp_path, "auto"))
    again = replace(crash_from(halves, [1, 2, 3, 4]), tried=list(crash.tried))
    assert deciding(again, settings(tmp_path, "auto")) is None  # only the untried surgery is left, and it needs a trial
    offered = json.loads((tmp_path / "ws" / "repairbot_suggestions.jsonl").read_text().splitlines()[-1])
    assert [s["kind"] for s in offered["suggestions"]] == ["surgery"] and first == Action("n = int(n)")


def test_never_records_and_returns_none(tmp_path: Path) -> None:
    crash = crash_from(halves, [1, 2, 3, 4])
    assert deciding(crash, settings(tmp_path, "never")) is None
    entry = json.loads((tmp_path / "ws" / "repairbot_suggestions.jsonl").read_text().splitlines()[-1])
    assert entry["approve"] == "never" and entry["suggestions"][0]["kind"] == "surgery"
    assert entry["fingerprint"] == fingerprint(build_report(crash))


def test_ask_without_a_terminal_returns_none(tmp_path: Path) -> None:
    # pytest's stdin is not a TTY, so nobody can be asked
    assert deciding(crash_from(halves, [1, 2, 3, 4]), settings(tmp_path, "ask")) is None


def test_runtime_objection_rules_a_suggestion_out(tmp_path: Path) -> None:
    crash = replace(crash_from(halves, [1, 2, 3, 4]),
                    check=lambda decision: "no surgery today" if isinstance(decision, Surgery) else None)
    assert isinstance(deciding(crash, settings(tmp_path, "auto")), Action)
