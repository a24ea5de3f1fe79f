"""What the remote-approval tests share: a real service, a real waiting training process, a real browser.

- `service()` starts the repair bot (rules backend, with a token) on 127.0.0.1 in a thread;
- `Job` runs `tests/programs/remote_training.py` in a subprocess with `approve="remote"` against it:
  a vaccinated PyTorch loop that crashes at step 5 and waits for a decision;
- `browser()` launches Debian's Chromium, headless, through Playwright's Python package, and skips
  the test — saying why — when either is missing (nothing is ever downloaded: Playwright is pointed
  at `/usr/bin/chromium`).
"""

from __future__ import annotations

import functools
import importlib.util
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import Any

import httpx
import pytest

from repairbot.server import start_in_thread

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "tests" / "programs" / "remote_training.py"
FAULTY_LINE = next(n for n, line in enumerate(PROGRAM.read_text().splitlines(), 1) if ".values.numpy()" in line)
"""The line of the program that crashes."""
TOKEN = "remote-test-token-4f1c9e"
HANG_S = 600.0
"""How long a job may take to reach its wait, or to finish, before the test calls it hung: starting, training
to the crash and trying the bot's suggestions took over 90 s on two cores at load 15."""
CHROMIUM = os.environ.get("DAIFU_CHROMIUM", "/usr/bin/chromium")
BROWSER_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


@contextmanager
def service(**options: Any) -> Iterator[str]:
    """A real repair bot on 127.0.0.1 with the test token; yields its URL."""
    url, stop = start_in_thread(token=TOKEN, **options)
    try:
        yield url
    finally:
        stop()


def api(url: str) -> httpx.Client:
    """A client of the decision API, holding the service token."""
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=70)


def _as_from_a_terminal() -> None:
    """Ctrl-C reaches the job as it does a program started in a terminal: a shell script running the suite
    in the background (CI's `.ci/run`) leaves SIGINT ignored in what it starts, and Python then installs no
    KeyboardInterrupt handler, so `interrupt` would test nothing but the shell."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Job:
    """The training program, waiting on the service at `url` when it crashes."""

    def __init__(self, url: str, workdir: Path, name: str = "remote-test", **settings: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DAIFU_")}
        env.update(
            PYTHONPATH=str(ROOT),
            DAIFU_MODE="automatic",
            DAIFU_APPROVE="remote",
            DAIFU_REPAIRBOT_URL=url,
            DAIFU_REPAIRBOT_TOKEN=TOKEN,
            DAIFU_JOB_NAME=name,
            DAIFU_WORKSPACE=str(workdir / "daifu_workspace"),
            DAIFU_RECORD=str(workdir / "experiment_record.log"),
            PYTHONUNBUFFERED="1",
        )
        env.update(settings)
        self.url = url
        self.process = subprocess.Popen(
            [sys.executable, str(PROGRAM)], cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, preexec_fn=_as_from_a_terminal,
        )
        self.stdout = self.stderr = ""

    def pending(self, timeout: float = HANG_S) -> str:
        """The id of this job's repair once it waits on the service (fails if the process ends first)."""
        deadline = time.monotonic() + timeout
        with api(self.url) as client:
            while time.monotonic() < deadline:
                mine = [r for r in client.get("/v1/pending").json()
                        if r["status"] == "waiting" and r["job"]["pid"] == self.process.pid]
                if mine:
                    return str(mine[0]["id"])
                if self.process.poll() is not None:
                    self.finish()
                    raise AssertionError(f"the job ended before waiting:\n{self.stderr[-3000:]}")
                time.sleep(0.1)
        raise AssertionError("the job never posted a pending repair")

    def finish(self, timeout: float = HANG_S) -> int:
        """Wait for the process to end; its exit status (output in `stdout`, `stderr`)."""
        self.stdout, self.stderr = self.process.communicate(timeout=timeout)
        return self.process.returncode

    def result(self) -> dict[str, Any]:
        """The JSON line the program printed at the end."""
        lines = [line for line in self.stdout.splitlines() if line.startswith("{")]
        assert lines, f"no result printed:\n{self.stderr[-3000:]}"
        return json.loads(lines[-1])  # type: ignore[no-any-return]

    def interrupt(self) -> None:
        self.process.send_signal(signal.SIGINT)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


@contextmanager
def job(url: str, workdir: Path, **settings: str) -> Iterator[Job]:
    """A `Job`, killed at the end if it still runs."""
    running = Job(url, workdir, **settings)
    try:
        yield running
    finally:
        running.kill()


@functools.cache
def fixed_result() -> dict[str, Any]:
    """What the hand-fixed program gives: the result a repaired run must reproduce (computed once). Its
    `main("fixed")` runs the fixed loop plain, here: a process of its own only imported torch again."""
    spec = importlib.util.spec_from_file_location("remote_training_fixed", PROGRAM)
    assert spec is not None and spec.loader is not None
    program = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(program)
    printed = io.StringIO()
    with redirect_stdout(printed):
        program.main("fixed")
    return json.loads(printed.getvalue().strip().splitlines()[-1])  # type: ignore[no-any-return]


def browser_missing() -> str | None:
    """Why no browser test can run here, or `None`."""
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright's Python package is not installed (pip install playwright; no browser download needed)"
    return None


@contextmanager
def browser() -> Iterator[Any]:
    """Debian's Chromium, headless, driven by Playwright; the test skips, saying why, without one."""
    missing = browser_missing()
    if missing:
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        try:
            yield launched
        finally:
            launched.close()


def login(context: Any, url: str, name: str, target: str = "/ui") -> Any:
    """A page of `context`, logged in to the approval page as `name`, showing `target`."""
    page = context.new_page()
    page.goto(f"{url}{target}")
    assert "/ui/login" in page.url  # the page needs the token first
    page.fill("input[name=token]", TOKEN)
    page.fill("input[name=name]", name)
    page.click("form.login button[type=submit]")
    page.wait_for_url(f"{url}{target}")
    return page


def until(condition: Callable[[], bool], timeout: float = 30.0, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:g} s")
        time.sleep(0.05)


def halves(xs: list[int]) -> list[int]:
    """A function with a real bug (`/` where `//` was meant), crashed for the pending repairs posted here."""
    n = len(xs) / 2
    return xs[:n]  # type: ignore[misc]


def post_pending(url: str, candidates: list[Any]) -> str:
    """A pending repair posted as a waiting process posts it (a real crash of `halves`, the rules engine's
    diagnosis, the given `PendingCandidate`s); its id. Nothing answers its proposals: a page to look at."""
    from repairbot.protocol import JobInfo, PendingRepairRequest
    from repairbot.rules import analyse
    from tests.botfixtures import report_of

    report = report_of(halves, [1, 2, 3, 4])
    body = PendingRepairRequest(job=JobInfo(name="page", host="here", pid=4242), report=report,
                                diagnosis=analyse(report)[0], backend_used="rules", candidates=candidates,
                                deadline_s=600)
    with api(url) as client:
        created = client.post("/v1/pending", json=body.model_dump(mode="json"))
    assert created.status_code == 201, created.text
    return str(created.json()["id"])
