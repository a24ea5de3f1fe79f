"""Crash reports: what they hold, what they never hold, and how big they get."""

# ruff: noqa: E402
from __future__ import annotations

import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("pydantic")

import daifu

from repairbot.protocol import fingerprint
from daifu.report.build import MAX_REPORT_BYTES, build_report, render_report_text
from daifu.report.summary import summarize, summarize_namespace
from tests.botfixtures import crash_from


def parse_config(text):
    return int(text)


def load_settings(raw, api_key=None):
    retries = 3
    try:
        value = parse_config(raw)
    except ValueError as error:
        raise RuntimeError("bad settings") from error
    return value, api_key, retries


def test_frames_run_from_the_vaccinated_function_to_the_raise() -> None:
    report = build_report(crash_from(load_settings, "x"))
    assert [f.function for f in report.frames] == ["load_settings"]  # the raise is in the function
    inner = build_report(crash_from(parse_config, "x"))
    assert inner.frames[0].function == "parse_config" and inner.frames[0].code == "return int(text)"


def test_chained_causes_are_reported() -> None:
    report = build_report(crash_from(load_settings, "x"))
    assert report.exception.type == "RuntimeError"
    assert [(c.relation, c.type) for c in report.exception.chain] == [("cause", "ValueError")]


def swallowing():
    try:
        {}["missing"]
    except KeyError:
        raise ValueError("replaced") from None


def test_suppressed_context_is_left_out() -> None:
    assert build_report(crash_from(swallowing)).exception.chain == []


def test_secrets_are_redacted_and_environment_values_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_SERVICE_PASSWORD", "hunter2-environment")
    report = build_report(crash_from(load_settings, "x", "sk-very-secret-value"))
    text = report.model_dump_json()
    assert report.variables["api_key"].text == "<redacted>"
    assert report.variables["retries"].facts == {"value": 3}
    assert "sk-very-secret-value" not in text and "hunter2-environment" not in text


def callee_frames(values):
    return sorted(values, key=lambda v: v.size)


def test_library_frames_are_marked_and_user_callees_carry_source() -> None:
    report = build_report(crash_from(callee_frames, [1, 2]))
    assert [f.library for f in report.frames] == [False, False]  # the lambda is the user's
    assert report.frames[1].function == "<lambda>"


def deep(n, payload):
    if n == 0:
        raise ValueError("bottom")
    return deep(n - 1, payload)


def test_reports_stay_within_their_bound() -> None:
    crash = crash_from(deep, 300, ["y" * 250] * 100)
    crash = replace(crash, source=crash.source + "# padding\n" * 40_000,
                    locals={**crash.locals, **{f"extra{i}": "y" * 10_000 for i in range(300)}})
    report = build_report(crash)
    assert len(report.model_dump_json().encode()) <= MAX_REPORT_BYTES
    assert report.truncated and report.frames[-1].code == 'raise ValueError("bottom")'


def same_site(value):
    return 10 / value


def test_fingerprint_ignores_the_message_but_not_the_site() -> None:
    first = build_report(crash_from(same_site, 0))
    second = build_report(crash_from(same_site, 0.0))
    assert fingerprint(first) == fingerprint(second)
    other = build_report(crash_from(deep, 0, None))
    assert fingerprint(other) != fingerprint(first)


def test_rendered_text_shows_exception_statement_and_variables() -> None:
    text = render_report_text(build_report(crash_from(load_settings, "x")))
    assert "RuntimeError: bad settings" in text
    assert "caused by ValueError" in text
    assert 'raise RuntimeError("bad settings") from error' in text
    assert "api_key = <redacted>" in text and "retries = 3" in text


def test_paths_say_whether_they_and_their_parent_exist(tmp_path: Path) -> None:
    (tmp_path / "model.pt").write_bytes(b"")
    near = summarize(tmp_path / "modle.pt").facts
    assert near["exists"] is False and near["parent_exists"] is True and near["close"] == ["model.pt"]
    far = summarize(str(tmp_path / "nope" / "x.pt")).facts
    assert far["exists"] is False and far["parent_exists"] is False


def test_summaries_are_bounded_and_never_raise() -> None:
    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    assert summarize(Hostile()).text == "<repr failed: RuntimeError>"
    assert len(summarize("z" * 10_000).text) <= 300
    assert summarize([[[1]] * 100] * 100).text.startswith("list of length 100")
    assert set(summarize_namespace({"__builtins__": 1, "token_file": "a", "n": 1})) == {"token_file", "n"}


def test_a_repr_or_str_that_never_returns_is_cut_short_and_paid_once(decide) -> None:
    """Issue 9.6: the crash handler never hangs on a value's description, and describes it once."""
    calls = []

    class Endless:
        def __repr__(self) -> str:
            calls.append("repr")
            while True:
                pass

    class Mute(Exception):
        def __str__(self) -> str:
            while True:
                pass

    reports = []
    decide(lambda crash: reports.append(build_report(crash)) or daifu.Skip())

    @daifu.transform
    def train():
        value = Endless()
        raise Mute()

    train()
    report = reports[0]
    assert report.variables["value"].text == "<repr timed out>" and calls == ["repr"]
    assert report.exception.message == "<str timed out>"


class Blocked:
    """A value whose description waits on `release`, as a native `__repr__` blocked on a lock or a
    socket would: no Python line runs meanwhile, so only a deadline outside the call can end the wait."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release

    def __repr__(self) -> str:
        self.release.wait(600)
        return "Blocked()"


class BlockedClass:
    """A value whose `__class__` property blocks (`isinstance` reads it)."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        self.release.wait(600)
        return BlockedClass


class BlockedList(list):
    """A list whose `__len__` blocks."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__([1, 2])
        self.release = release

    def __len__(self) -> int:
        self.release.wait(600)
        return 2


class BlockedError(Exception):
    def __init__(self, release: threading.Event) -> None:
        self.release = release

    def __str__(self) -> str:
        self.release.wait(600)
        return "blocked"


def test_a_repr_len_or_class_blocked_in_native_code_does_not_hold_the_crash(decide) -> None:
    """Issue 28.5: describing values runs under a real deadline; the blocked calls are abandoned."""
    release = threading.Event()
    reports = []
    decide(lambda crash: reports.append(build_report(crash)) or daifu.Skip())

    @daifu.transform
    def train():
        value, shape, items = Blocked(release), BlockedClass(release), BlockedList(release)
        raise BlockedError(release)

    handled = threading.Event()

    def run() -> None:
        train()
        handled.set()

    try:
        threading.Thread(target=run, daemon=True).start()
        assert handled.wait(120), "the crash was held by a blocked description"
    finally:
        release.set()  # the abandoned helpers finish
    variables = reports[0].variables
    assert [variables[name].text for name in ("value", "shape", "items")] == ["<repr timed out>"] * 3
    assert reports[0].exception.message == "<str timed out>"


@pytest.mark.torch
def test_tensor_summary_counts_nan_and_inf() -> None:
    torch = pytest.importorskip("torch")
    facts = summarize(torch.tensor([1.0, float("nan"), float("inf"), 3.0], requires_grad=True)).facts
    assert facts["shape"] == [4] and facts["nan"] == 1 and facts["inf"] == 1 and facts["requires_grad"]
    assert facts["min"] == 1.0 and facts["max"] == 3.0
    model = torch.nn.Sequential(torch.nn.Linear(4, 2))
    assert summarize(model).facts["linears"] == [["0", 4, 2]]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    assert summarize(optimizer).facts["lr"] == 0.5


def test_reports_do_not_import_torch() -> None:
    code = (
        "import sys; from tests.botfixtures import crash_from; from daifu.report.build import build_report\n"
        "from tests.test_report import same_site\n"
        "build_report(crash_from(same_site, 0)); assert 'torch' not in sys.modules, 'torch was imported'"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=Path(__file__).parent.parent, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
