"""The service's own limits (issue 28.5): a body must arrive in time, wrong logins are throttled, and a
repair's page (diffs of large sources) is built off the event loop, which keeps answering meanwhile."""

from __future__ import annotations

import socket
import threading
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

import httpx

import repairbot.ui
from repairbot.throttle import LoginThrottle
from tests.remotefixtures import TOKEN, api, service
from tests.test_remote_api import FakeProcess


def test_a_body_that_trickles_in_is_refused_with_408_while_other_requests_are_served() -> None:
    with service(body_seconds=1.0) as url:
        address = urlsplit(url)
        with socket.create_connection((address.hostname, address.port), timeout=60) as slow:
            slow.sendall(
                b"POST /v1/suggest HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                + f"Authorization: Bearer {TOKEN}\r\nContent-Length: 100000\r\n\r\n".encode()
                + b'{"report": '
            )  # and nothing more
            assert httpx.get(f"{url}/healthz", timeout=30).status_code == 200
            answer = _read_until_closed(slow)
        assert answer.startswith("HTTP/1.1 408") and "did not arrive within 1 s" in answer, answer


def _read_until_closed(connection: socket.socket) -> str:
    """All the server sends before it closes: its headers and body may come in separate packets."""
    received = b""
    while chunk := connection.recv(4096):
        received += chunk
    return received.decode()


def test_wrong_logins_are_throttled_per_address() -> None:
    with service() as url:
        with httpx.Client(base_url=url, timeout=30) as guesser:
            tries = [guesser.post("/ui/login", data={"token": f"guess{n}", "name": "m"}) for n in range(5)]
            assert [reply.status_code for reply in tries] == [401] * 5
            blocked = guesser.post("/ui/login", data={"token": TOKEN, "name": "m"})  # even the right one
            assert blocked.status_code == 429 and int(blocked.headers["retry-after"]) > 0
            assert "Too many wrong tokens" in blocked.text
        elsewhere = httpx.HTTPTransport(local_address="127.0.0.2")
        with httpx.Client(base_url=url, timeout=30, transport=elsewhere) as person:
            assert person.post("/ui/login", data={"token": TOKEN, "name": "alice"}).status_code == 303


def test_the_throttle_forgets_after_its_window_and_bounds_all_addresses_together() -> None:
    now = [0.0]
    throttle = LoginThrottle(window=60, per_address=2, overall=3, addresses=2, clock=lambda: now[0])
    throttle.failed("a")
    throttle.failed("a")
    assert throttle.wait("a") == 60 and throttle.wait("b") == 0
    throttle.failed("b")
    assert throttle.wait("c") == 60  # three failures in all: every address waits
    now[0] = 61.0
    assert throttle.wait("a") == throttle.wait("c") == 0
    for name in "xyz":
        throttle.failed(name)
    assert len(throttle._failures) == 2  # the oldest address is forgotten


def test_a_repairs_page_is_built_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    real, entered, release, threads = repairbot.ui.source_diff, threading.Event(), threading.Event(), []

    def slow_diff(*arguments: Any) -> Any:
        """The diff as a large source makes it: long. It ends when the test has seen the service answer."""
        threads.append(threading.current_thread().name)
        entered.set()
        release.wait(60)
        return real(*arguments)

    monkeypatch.setattr(repairbot.ui, "source_diff", slow_diff)
    with service() as url:
        process, pages = FakeProcess(url), []
        viewer = threading.Thread(target=lambda: pages.append(api(url).get(f"/ui/repairs/{process.id}")))
        viewer.start()
        try:
            assert entered.wait(60)
            assert httpx.get(f"{url}/healthz", timeout=30).status_code == 200  # while the diff is computed
        finally:
            release.set()
            viewer.join(60)
    assert pages[0].status_code == 200 and "n = len(xs) // 2" in pages[0].text
    assert threads and threads[0] != "daifu-server"
