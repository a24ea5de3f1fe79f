"""`daifu.core.bounded`: a call abandoned at its deadline, written in Python, stops rather than spinning on."""

from __future__ import annotations

import time

import pytest

from daifu.core.bounded import TimedOut, bounded


def _stopped(progress: list[int], within: float = 60.0) -> bool:
    """Whether `progress[0]` stays still for a while, looked at until `within` seconds have passed."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        before = progress[0]
        time.sleep(0.2)
        if progress[0] == before:
            return True
    return False


def _spin(progress: list[int]) -> None:
    while True:  # no Python function called: only a trace on its lines can stop it
        progress[0] += 1


def _nested(progress: list[int]) -> None:
    def inner() -> None:
        while True:
            progress[0] += 1

    inner()


@pytest.mark.parametrize("loop", [_spin, _nested])
def test_an_abandoned_loop_in_python_stops_at_its_next_line(loop) -> None:
    progress = [0]
    with pytest.raises(TimedOut):
        bounded(loop, progress, seconds=0.05)
    assert _stopped(progress), "the abandoned call went on running in its helper"


def test_a_call_that_ends_in_time_gives_its_result_and_leaves_no_trace_behind() -> None:
    def total(n: int) -> int:
        return sum(range(n))

    assert bounded(total, 1000) == sum(range(1000))
    assert bounded(total, 10) == 45  # the helper is handed work again: its trace was put back

    def traced_here() -> object:
        import sys

        return sys.gettrace()

    assert bounded(traced_here) is not None  # the call runs under the deadline's trace
