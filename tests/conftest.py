"""Every test runs in its own working directory with DaiFu's settings reset around it; the slow ones first;
PyTorch computes on one thread in every process of the suite."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterator

import pytest

import daifu
from daifu import config
from daifu.state import RUN

# One OpenMP thread per process, set before any test module imports torch, and inherited by every program
# a test starts: the workers (pyproject's `addopts`: one per CPU and one more) already use every core, and each one's
# own pool of a thread per core made the cores wait on each other (measured: a fifth more CPU time for
# the torch tests, one process alone). The suite's tensors are small: one thread computes them as fast.
# A trial from a process with a two-thread pool: tests/test_trials.py. A value set outside is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Ctrl-C as a person's terminal sends it. A suite started in the background by a shell without job control
# (a CI script's `... &`) inherits SIGINT ignored (POSIX), and so would every program a test starts: Python
# then installs no KeyboardInterrupt handler, and a test typing Ctrl-C at a `(DaiFu)` prompt waited for its
# 60-second timeout (seen in 2 of 4 full runs started that way, the workers' earlier tests deciding which).
# A handler here (not "ignored") is reset to the default in each program a test starts, at its exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pyproject's `addopts`): a worker per CPU and one more. Part of the suite's time is spent
    waiting (servers started and stopped, a model server's delays, a prompt read from a terminal, a rank
    waiting for its peer): on two cores, two workers left a core idle for 2 of the 9.5 core-minutes of a
    quiet run (4 min 44 s wall, 7 min 27 s of CPU); a third worker fills those waits.
    `PYTEST_XDIST_AUTO_NUM_WORKERS` still says how many."""
    chosen = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    if chosen:
        return int(chosen)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cpus + 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked `slow` or `e2e` first, the others in their order: the parallel workers (pyproject's
    `addopts`) start with the longest files and end together instead of one waiting on a slow file started last."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None and item.get_closest_marker("e2e") is None)


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DAIFU_WORKSPACE", str(tmp_path / "daifu_workspace"))
    monkeypatch.setenv("DAIFU_RECORD", str(tmp_path / "experiment_record.log"))
    for name in ("DAIFU_MODE", "DAIFU_APPROVE", "DAIFU_REPAIRBOT_URL", "DAIFU_BOT_DEADLINE", "DAIFU_MAX_ATTEMPTS"):
        monkeypatch.delenv(name, raising=False)
    config.reset()
    RUN.reset()
    yield
    config.reset()
    RUN.reset()


@pytest.fixture(scope="module")
def bot_url() -> Iterator[str]:
    """The embedded rules bot, served over HTTP on a free port of 127.0.0.1 for a module's tests."""
    from repairbot.server import start_in_thread  # the bot's packages are optional: imported where used

    url, stop = start_in_thread(backend="rules", port=0)
    yield url
    stop()


@pytest.fixture
def automatic(bot_url: str, tmp_path: Path) -> Callable[[], list[dict[str, Any]]]:
    """Automatic mode against the real bot; returns a function giving the repairs of this test."""
    daifu.configure(mode="automatic", approve="auto", bot_url=bot_url, workspace=tmp_path / "daifu_workspace")
    before = RUN.recorded
    return lambda: RUN.repairs_since(before)


@pytest.fixture
def automatic_embedded(tmp_path: Path) -> Callable[[], list[dict[str, Any]]]:
    """Automatic mode with the embedded offline bot in this process (no server), every candidate tried
    before it is applied; returns a function giving the repairs of this test."""
    daifu.configure(mode="automatic", approve="auto", workspace=tmp_path / "daifu_workspace")
    before = RUN.recorded
    return lambda: RUN.repairs_since(before)


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Path]:
    """Automatic mode with the embedded offline bot, its records in the returned folder, and trials given
    60 s: the per-sample programs' trials run several iterations, slowly on a loaded machine."""
    daifu.configure(mode="automatic", approve="auto", bot_url=None, workspace=str(tmp_path / "ws"), trial_seconds=60)
    yield tmp_path / "ws"
    daifu.configure(mode=None, approve=None, bot_url=None, workspace=None, trial_seconds=None)


@pytest.fixture
def decide() -> Callable[..., list[daifu.Crash]]:
    """Install a policy that answers crashes with the given decisions in order; returns the crashes seen.

    Each element is a decision or a callable `crash -> decision`.
    """

    def install(*answers: Any) -> list[daifu.Crash]:
        seen: list[daifu.Crash] = []
        queue = list(answers)

        def policy(crash: daifu.Crash) -> Any:
            seen.append(crash)
            answer = queue.pop(0) if queue else daifu.Raise()
            return answer(crash) if callable(answer) and not isinstance(answer, type) else answer

        daifu.set_policy(policy)
        return seen

    return install
