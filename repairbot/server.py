"""Running the repair bot: in the foreground (`daifu serve`), or in a thread (demos and tests)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import secrets
import socket
import threading
import time
from typing import Any
from collections.abc import Callable

import uvicorn
from loguru import logger

from repairbot.app import create_app
from repairbot.backends.base import Backend
from repairbot.backends.registry import make_backend
from repairbot.deadline import server_default


GRACE_S = 2
"""Seconds Ctrl-C waits for requests in flight before they are cancelled. A waiting process holds a long
poll open (up to a minute), and one that died holds it to its end: uvicorn would wait for all of them. A
cancelled poll costs nothing: a live process polls again, and the repair is still held until it is gone."""


class _ThreadServer(uvicorn.Server):
    """A uvicorn server in a thread of the program: it leaves signal handlers to the main thread's owner,
    and `stop_soon` wakes its loop at once (uvicorn's own loop looks at `should_exit` every 0.1 s: a
    program or a test stopping its embedded bot waited for that tick)."""

    _loop: asyncio.AbstractEventLoop | None = None
    _stopping: asyncio.Event | None = None

    def install_signal_handlers(self) -> None:
        pass

    async def main_loop(self) -> None:
        """uvicorn's loop of ticks (each keeps the `Date` header and the request limits current), a tick
        every 0.1 s or as soon as `stop_soon` is called."""
        self._stopping, self._loop = asyncio.Event(), asyncio.get_running_loop()
        ticks = 0
        while not await self.on_tick(ticks):
            ticks = (ticks + 1) % 864000
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), 0.1)

    def stop_soon(self) -> None:
        """Ask the server to shut down, from any thread; it does so without waiting for its next tick."""
        self.should_exit = True
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop has ended already
                loop.call_soon_threadsafe(stopping.set)


class ExposedWithoutToken(ValueError):
    """Serving beyond loopback without a bearer token, and without `allow_remote` to say it is meant."""


def serve(
    host: str = "127.0.0.1",
    port: int = 8765,
    backend: str = "rules",
    token: str | None = None,
    deadline: float | None = None,
    *,
    allow_remote: bool = False,
) -> None:
    """Serve the repair bot until interrupted (Ctrl-C). Loopback by default: reports hold code.

    token: required on `/v1` (`DAIFU_REPAIRBOT_TOKEN` if not given). Listening on any address
    beyond loopback without a token raises `ExposedWithoutToken`, unless `allow_remote`; then it
    only warns: anyone who reaches the port can read the answers and fill the cache.
    Raises `ValueError` before listening when the backend cannot work as configured (the message
    says what to set) or the deadline is not a positive number of seconds.
    """
    token = token or os.environ.get("DAIFU_REPAIRBOT_TOKEN") or None
    shown = port or "<the port uvicorn names below>"  # port 0: the system picks one
    if token is None and not is_loopback(host):
        if not allow_remote:
            raise ExposedWithoutToken(
                f"Refusing to listen on {host} without a token: anyone who can reach it could use the repair "
                "bot. Set DAIFU_REPAIRBOT_TOKEN, listen on 127.0.0.1, or pass --allow-remote if this is meant."
            )
        logger.warning(
            "Listening on {} without a token (--allow-remote): anyone who can reach port {} can use the repair bot.",
            host,
            shown,
        )
    chosen = make_backend(backend)
    info = chosen.info()
    if not info.available and info.reachable is not False:  # configured wrong: it never could
        raise ValueError(f"the {backend} backend cannot work: {info.detail}")
    seconds = deadline if deadline is not None else server_default()
    if not 0 < seconds <= 3600:
        raise ValueError(f"--deadline {seconds:g}: expected a number of seconds between 0 and 3600")
    ui_token = None if token else secrets.token_urlsafe(16)  # a person must prove something to decide a repair
    if info.reachable is False:  # a model server that is not up yet may come: crashes get the rules meanwhile
        logger.warning("Backend {}: {}; until it answers, crashes are answered by the rules engine", backend,
                       info.detail)
    else:
        logger.info("Backend {}: {}", backend, info.detail)
    logger.info(
        "Repairs waiting for a decision (approve='remote'): http://{}:{}/ui — log in with {}",
        host, shown, "the service token (DAIFU_REPAIRBOT_TOKEN)" if token else f"this run's token {ui_token}",
    )
    uvicorn.run(create_app(chosen, token=token, deadline=seconds, ui_token=ui_token), host=host, port=port,
                log_level="info", timeout_graceful_shutdown=GRACE_S)


def is_loopback(host: str) -> bool:
    """Whether `host` names only this machine: `localhost`, or a loopback address (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # another host name: it may resolve to any interface


def start_in_thread(
    backend: str | Backend = "rules", port: int = 0, *, token: str | None = None, **app_options: Any
) -> tuple[str, Callable[[], None]]:
    """Start a real repair bot on 127.0.0.1 in a daemon thread; return its URL and a function stopping it.

    `port=0` takes a free port; `app_options` go to `create_app`.
    """
    return serve_in_thread(create_app(backend, token=token, **app_options), port)


def serve_in_thread(app: Any, port: int = 0, timeout: float = 10.0) -> tuple[str, Callable[[], None]]:
    """Serve any ASGI `app` on 127.0.0.1 in a daemon thread, once uvicorn says it has started.

    Raises `RuntimeError` if it has not started within `timeout` seconds.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    server = _ThreadServer(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="daifu-server")
    thread.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.stop_soon()
            sock.close()
            raise RuntimeError(f"The server did not start at {url}.")
        time.sleep(0.01)

    def stop() -> None:
        server.stop_soon()
        thread.join(timeout)
        sock.close()

    return url, stop
