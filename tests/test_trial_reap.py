"""A fork trial's copy is reaped once its verdict is in, without the parent waiting for the copy's exit."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import daifu
from daifu.core import trial
from daifu.core.trial import Outcome, _whole

pytestmark = pytest.mark.skipif(trial.unavailable() is not None, reason=f"no trials here: {trial.unavailable()}")


def _zombies() -> list[int]:
    """This process's children that have exited and not been reaped."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z" and int(fields[1]) == os.getpid():
            found.append(int(entry.name))
    return found


def _none_left(before: set[int], within: float = 60.0) -> bool:
    """Whether no child but those in `before` is left unreaped, looked at until `within` seconds have passed."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        if not set(_zombies()) - before:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_the_copy_is_reaped_after_its_verdict_and_the_verdict_is_whole() -> None:
    @daifu.transform
    def f(x):
        return 1 / x

    found: list[daifu.Verdict] = []
    before = set(_zombies())  # another test's, if any
    daifu.set_policy(lambda crash: found.append(crash.trial(daifu.Action("x = 2"), 10.0)) or daifu.Raise())
    with pytest.raises(ZeroDivisionError):
        f(0)
    assert found[0].outcome is Outcome.COMPLETED and found[0].passed, found[0].describe()
    assert _none_left(before), f"unreaped trial copies: {set(_zombies()) - before}"


def test_a_verdict_counts_as_in_only_when_all_of_it_came() -> None:
    whole = b'{"outcome": "completed", "detail": "a } in a string", "nested": {"a": [1, {"b": 2}]}}'
    assert _whole(whole) == {"outcome": "completed", "detail": "a } in a string", "nested": {"a": [1, {"b": 2}]}}
    for end in range(len(whole)):  # no part of it is taken for the verdict
        assert _whole(whole[:end]) is None
    assert _whole(b"[1, 2]") is None and _whole(b"garbage}") is None
