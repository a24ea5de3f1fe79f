"""Every test runs in its own working directory with DaiFu's settings reset around it; the slow ones first;
PyTorch computes on one thread in every process of the suite."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterator

import pytest

import daifu
from daifu import config
from daifu.state import RUN

# One OpenMP thread per process, set before any test module imports torch, and inherited by every program
# a test starts: the workers (pyproject's `addopts`: one per CPU) already use every core, and each one's
# own pool of a thread per core made the cores wait on each other (measured: a fifth more CPU time for
# the torch tests, one process alone). The suite's tensors are small: one thread computes them as fast.
# A trial from a process with a two-thread pool: tests/test_trials.py. A value set outside is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")


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
