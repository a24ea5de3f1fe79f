"""The client bounds a call to the repair bot in time and in size, over real HTTP on 127.0.0.1.

A bot that trickles its reply a byte at a time once stalled training 81.6 s (the 30 s timeout was
per read), and a 256 MiB reply took training from 320 to 833 MiB of RSS. Now one deadline bounds the
whole call and the reply is read as it streams, up to a cap; past either, the embedded rules engine
answers, with a warning naming the URL and what happened. Times are checked against generous
bounds from an outside clock: these are checks of a bound, not measurements of speed.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

import daifu
from daifu.decide.botclient import MAX_REPLY_BYTES, ask_bot
from daifu.config import ConfigError, configure, settings
from tests.botfixtures import report_of


def halves(xs):
    n = len(xs) / 2
    return xs[:n]


class ScriptedServer:
    """An HTTP server on 127.0.0.1 that reads one request, then sends `chunks`, `interval` seconds apart.

    `request` is the body received; `sent` counts the bytes the kernel took (what the client read,
    plus at most the two sockets' buffers); `hung_up` is set once a send fails because the client
    closed the connection.
    """

    def __init__(self, chunks: Iterable[bytes], interval: float = 0.0) -> None:
        self.chunks, self.interval = chunks, interval
        self.request = b""
        self.sent = 0
        self.hung_up = threading.Event()
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        connection, _ = self._listener.accept()
        with connection:
            self.request = _read_request(connection)
            for index, chunk in enumerate(self.chunks):
                if index and self._stop.wait(self.interval) or self._stop.is_set():
                    return
                try:
                    connection.sendall(chunk)
                except OSError:
                    self.hung_up.set()
                    return
                self.sent += len(chunk)

    def close(self) -> None:
        self._stop.set()
        self._listener.close()


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"


def trickle(phase: str) -> Iterator[bytes]:
    """A reply one byte at a time: its headers (`"headers"`), or its body after headers sent at once."""
    head = HEAD % 100_000
    if phase == "headers":
        yield from (bytes([b]) for b in head)
    else:
        yield head
        yield from (b" " for _ in range(100_000))


def _read_request(connection: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += connection.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += connection.recv(65536)
    return body


@pytest.mark.parametrize("phase", ["headers", "body"])
def test_a_trickling_bot_is_cut_at_the_deadline(phase: str) -> None:
    server = ScriptedServer(trickle(phase), interval=0.5)
    try:
        start = time.monotonic()
        answer = ask_bot(report_of(halves, [1, 2, 3, 4]), server.url, deadline=2.0)
        elapsed = time.monotonic() - start
        # At the deadline: per-read timeouts would have waited for the whole trickle (the headers alone: 50 s).
        assert 1.8 <= elapsed < 30, elapsed
        assert answer.source == "in-process" and answer.suggestions[0].kind == "surgery"
        assert server.url in (answer.warning or "") and "2 s deadline" in (answer.warning or "")
        assert json.loads(server.request)["deadline_s"] == 2.0  # the service may bound its work by it
        assert server.hung_up.wait(10)  # nothing is left reading the trickle
    finally:
        server.close()


def huge_reply(total: int, declare: bool) -> Iterator[bytes]:
    """A `total`-byte reply in 1 MiB chunks, its length declared in a header or not (a chunked body)."""
    if declare:
        yield HEAD % total
        yield from (b" " * 2**20 for _ in range(total // 2**20))
    else:
        yield b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        yield from (b"100000\r\n" + b" " * 2**20 + b"\r\n" for _ in range(total // 2**20))
        yield b"0\r\n\r\n"


@pytest.mark.parametrize("declare", [False, True], ids=["streamed", "declared"])
def test_a_256_mib_reply_is_refused_without_reading_it(declare: bool) -> None:
    server = ScriptedServer(huge_reply(256 * 2**20, declare))
    try:
        answer = ask_bot(report_of(halves, [1, 2, 3, 4]), server.url, deadline=30.0)
        assert server.hung_up.wait(10)
    finally:
        server.close()
    assert answer.source == "in-process" and answer.suggestions
    if declare:
        assert f"declares {256 * 2**20} bytes; at most {MAX_REPLY_BYTES}" in (answer.warning or "")
    else:
        assert f"passed {MAX_REPLY_BYTES} bytes" in (answer.warning or "")
    assert server.sent <= MAX_REPLY_BYTES + 32 * 2**20, server.sent  # what was read, and the sockets' buffers


def test_the_deadline_is_a_validated_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings().bot_deadline == 45.0
    monkeypatch.setenv("DAIFU_BOT_DEADLINE", "2.5")
    assert settings().bot_deadline == 2.5
    assert configure(bot_deadline=7).bot_deadline == 7.0
    configure(bot_deadline=None)
    with pytest.raises(ConfigError, match="configure\\(bot_deadline=...\\) has value -3"):
        configure(bot_deadline=-3)
    for bad in ("0", "-1", "nan", "inf", "soon"):
        monkeypatch.setenv("DAIFU_BOT_DEADLINE", bad)
        with pytest.raises(ConfigError, match=f"DAIFU_BOT_DEADLINE has value '{bad}'"):
            settings()


def test_training_goes_on_past_a_trickling_bot(tmp_path: Path) -> None:
    server = ScriptedServer(trickle("body"), interval=0.5)
    log: list[str] = []

    def halve_and_log(xs: list[int]) -> Any:
        log.append("started")  # runs once: the repair resumes at the faulty statement
        n = len(xs) / 2
        return xs[:n]  # type: ignore[index]  # the crash this test is about

    try:
        daifu.configure(mode="automatic", approve="auto", bot_url=server.url, bot_deadline=2, workspace=tmp_path / "ws")
        start = time.monotonic()
        result = daifu.transform(halve_and_log)([1, 2, 3, 4])
        elapsed = time.monotonic() - start
    finally:
        server.close()
    assert result == [1, 2] and log == ["started"]
    assert elapsed < 60, elapsed  # it was 81.6 s with a byte every 5 s; uncut, this trickle lasts 14 h
    answers = [json.loads(line) for line in (tmp_path / "ws" / "repairbot_suggestions.jsonl").read_text().splitlines()]
    assert answers[-1]["source"] == "in-process" and "deadline" in answers[-1]["fallback_reason"]
