"""A hostile repair bot, over HTTP, against a real training run in automatic mode with `approve="auto"`.

A small FastAPI app on 127.0.0.1 answers every crash report with one payload of
`tests.hostile_payloads`, three ways: as an action, inside a surgery of the training function, and
inside a `patch_function` of the user function that crashed. DaiFu must run none of them: the run ends
with its original exception, the marker file never appears, the victims stay, and a loopback listener
gets no connection — while `OPENAI_API_KEY` holds a canary value that must not reach the listener or
the bot. A control run, where the bot answers with an admitted action that fixes the labels, shows that
the same path does apply what the allowlist admits; the same fix making a folder no crash asked for is
not applied (its own code reached that effect in its trial).
"""

from __future__ import annotations

import inspect
import json
import os  # noqa: F401 - a training script's globals: payloads such as `except ... as os` aim at it
import socket
import threading
from pathlib import Path
from collections.abc import Iterator
from typing import Any

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

import daifu
from repairbot.protocol import Suggestion
from tests.botfixtures import ScriptedBot, served_scripted_bot
from tests.copies import fresh
from tests.hostile_payloads import (
    AIMING_EDITS,
    PAYLOADS,
    Aiming,
    Payload,
    embedded_in_surgery,
    rendered,
    train_and_tidy,
)

torch = pytest.importorskip("torch")
F = torch.nn.functional

CANARY = "sk-proj-CANARYcanary0123456789abcdefXYZ"


def cross_entropy_of(out, y):
    return F.cross_entropy(out, y)


def train(model, optimizer, batches, losses):
    for x, y in batches:
        out = model(x)
        loss = cross_entropy_of(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


class Listener:
    """A loopback TCP server recording every connection and what it was sent."""

    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(16)
        self.port = self.socket.getsockname()[1]
        self.received: list[bytes] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            connection.settimeout(1)
            try:
                self.received.append(connection.recv(65536) or b"(connected)")
            except OSError:
                self.received.append(b"(connected)")
            connection.close()


@pytest.fixture(scope="module")
def bot() -> Iterator[tuple[ScriptedBot, str]]:
    with served_scripted_bot() as served:
        yield served


@pytest.fixture(scope="module")
def listener() -> Listener:
    return Listener()


@pytest.fixture(autouse=True)
def _unpatched() -> Iterator[None]:
    """A payload that got through as a patch must not change the code the next test runs."""
    code = cross_entropy_of.__code__
    yield
    cross_entropy_of.__code__ = code


@pytest.fixture
def places(tmp_path: Path) -> dict[str, Path]:
    found = {"marker": tmp_path / "marker", "victim": tmp_path / "victim", "victim_dir": tmp_path / "victim_dir"}
    found["victim"].write_text("keep me")
    found["victim_dir"].mkdir()
    return found


def run_training(bot_url: str, tmp_path: Path) -> Any:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 4)
    batches = [(x, torch.tensor([0, 1, 2, 1, 0, 1, 2, 1])), (x, torch.tensor([0.0, 1, 2, 1, 0, 1, 2, 1]))]
    daifu.configure(mode="automatic", approve="auto", bot_url=bot_url, workspace=tmp_path / "ws")
    return daifu.transform(train)(model, optimizer, batches, [])


def suggestions_for(code: str) -> list[Suggestion]:
    def make(kind: str, text: str, target: str | None = None) -> Suggestion:
        return Suggestion(kind=kind, code=text, explanation="Apply this.", confidence=0.99, target=target)

    return [
        make("action", code),
        make("surgery", embedded_in_surgery(code, inspect.getsource(train), "loss = cross_entropy_of(out, y)")),
        make(
            "patch_function",
            embedded_in_surgery(code, inspect.getsource(cross_entropy_of), "return F.cross_entropy"),
            f"sys.modules[{__name__!r}].cross_entropy_of",
        ),
    ]


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: p.name)
def test_no_hostile_payload_runs(
    payload: Payload,
    bot: tuple[ScriptedBot, str],
    listener: Listener,
    places: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    hostile, url = bot
    code = rendered(payload, str(places["marker"]), str(places["victim"]), str(places["victim_dir"]), listener.port)
    hostile.suggestions = suggestions_for(code)
    asked_before, received_before = len(hostile.requests), len(listener.received)

    with pytest.raises(RuntimeError, match="expected target dtype to be Long"):
        run_training(url, tmp_path)

    assert not places["marker"].exists() and places["victim"].read_text() == "keep me" and places["victim_dir"].is_dir()
    assert listener.received[received_before:] == []
    assert len(hostile.requests) > asked_before  # the bot was asked, over HTTP
    assert all(CANARY.encode() not in body for body in hostile.requests)
    answers = [json.loads(line) for line in (tmp_path / "ws" / "repairbot_suggestions.jsonl").read_text().splitlines()]
    for suggestion in answers[-1]["suggestions"]:
        assert not (suggestion["valid"] and suggestion["unattended"]), suggestion
        assert suggestion["needs_person"] or suggestion["reasons"], suggestion  # a reason is recorded


def test_the_same_path_applies_what_the_allowlist_admits(bot: tuple[ScriptedBot, str], tmp_path: Path) -> None:
    hostile, url = bot
    hostile.suggestions = [Suggestion(kind="action", code="y = y.long()", explanation="Fix the labels.",
                                      confidence=0.9)]
    losses = run_training(url, tmp_path)
    assert len(losses) == 2


def test_a_folder_no_crash_asked_for_is_not_made_unattended(
    bot: tuple[ScriptedBot, str], places: dict[str, Path], tmp_path: Path
) -> None:
    """`os.makedirs` is on the allowlist, for the folder a failing write needs; here the crash names
    no path, so the folder the repair's own code makes in its trial fails it, and none is made."""
    hostile, url = bot
    code = f"import os\nos.makedirs({str(places['marker'])!r}, exist_ok=True)\ny = y.long()"
    hostile.suggestions = [Suggestion(kind="action", code=code, explanation="Fix the labels.", confidence=0.9)]
    with pytest.raises(RuntimeError, match="expected target dtype to be Long"):
        run_training(url, tmp_path)
    assert not places["marker"].exists()


@pytest.mark.parametrize("edit", AIMING_EDITS, ids=lambda e: e.name)
def test_no_repair_aiming_the_programs_own_effects_is_applied(
    edit: Aiming, bot: tuple[ScriptedBot, str], places: dict[str, Path], tmp_path: Path
) -> None:
    """Issue 28: the right fix of the crash, with data the program's own `os.remove`, `rmtree` or
    `torch.save` then uses aimed at a victim, over HTTP, in automatic mode."""
    hostile, url = bot
    code = edit.code(inspect.getsource(train_and_tidy), str(places["victim"]), str(places["victim_dir"]))
    hostile.suggestions = [Suggestion(kind=edit.kind, code=code, explanation="Fix the labels.", confidence=0.99)]
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    daifu.configure(mode="automatic", approve="auto", bot_url=url, workspace=tmp_path / "ws")
    with pytest.raises(RuntimeError, match="expected target dtype to be Long"):
        daifu.transform(fresh(train_and_tidy))(
            model, torch.optim.SGD(model.parameters(), lr=0.1), [(torch.randn(2, 4), torch.tensor([0.0, 1.0]))],
            [], str(places["victim_dir"]), False, str(tmp_path / "model.pt"))
    assert places["victim"].read_text() == "keep me" and places["victim_dir"].is_dir()
