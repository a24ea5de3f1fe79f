"""What the allowlist keeps between checks of one running function (`daifu.decide.allowlist_flow`): the tree and
the flows of its source, never a verdict. Repairs checked one after the other against the same source each get
their own verdict, in either order, and a name rebound in the frame between two checks is seen by the second."""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

from daifu.decide.allowlist import build_context, check_safety  # noqa: E402

SOURCE = '''def train(folder, cleanup, steps):
    for step in range(steps):
        total = step * 2
        if cleanup:
            shutil.rmtree(folder)
        report(total)
'''


def report(value: Any) -> None:
    """The program's own helper: computes nothing that reaches the system."""


def values(**changed: Any) -> dict[str, Any]:
    return {"shutil": shutil, "report": report, "range": range, "folder": "/tmp/x", "cleanup": False, "steps": 3,
            "step": 0, "total": 0, **changed}


def test_each_repair_checked_against_the_same_source_gets_its_own_verdict() -> None:
    context = build_context(SOURCE, values(), __name__, 1)
    for _ in range(2):  # the second round finds the source's tree and flows kept from the first
        aiming = check_safety("cleanup = True", context)
        plain = check_safety("total = step * 3", context)
        assert any("rmtree" in reason for reason in aiming.reasons)
        assert plain.reasons == ()


def test_a_callee_rebound_between_two_checks_is_seen_by_the_second() -> None:
    before = build_context(SOURCE, values(), __name__, 1)
    after = build_context(SOURCE, values(report=shutil.rmtree), __name__, 1)

    assert check_safety("report(total)", before).reasons == ()
    assert check_safety("report(total)", after).reasons != ()
