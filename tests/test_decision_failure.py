"""A failure of DaiFu's own decision layer is said as DaiFu's, once, with what it was doing.

The user's exception goes on unchanged, as without DaiFu; the terminal says which step of DaiFu
failed (checking a suggestion against the allowlist, trying it, asking the bot) and where in DaiFu's
code, so that it can be reported — not a `RuntimeWarning` pointing at the user's call site. A policy
that raises is the user's code, and keeps its warning.

The failure is made here by replacing one step of the decision layer with one that raises: nothing
in the decision layer is known to fail on its own, which is the point of the fixes this guards.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

import daifu
from daifu.decide import verify
from tests.copies import fresh


def halves(xs):
    n = len(xs) / 2
    return xs[:n]


def broken_context(crash: object) -> object:
    raise KeyError("a bug in the allowlist's context")


def test_a_failure_of_the_decision_layer_is_said_once_as_daifus_with_its_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(verify, "context_for", broken_context)
    daifu.configure(mode="automatic", approve="auto", workspace=tmp_path / "ws")
    function = daifu.transform(fresh(halves))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no warning pointing at the user's call site
        for _ in range(2):
            with pytest.raises(TypeError, match="slice indices must be integers"):
                function([1, 2, 3, 4])
    lines = [line for line in capsys.readouterr().err.splitlines() if "failed while" in line]
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith("DaiFu: DaiFu's own bot failed while checking the bot's suggestion 1 (")
    assert "against the allowlist: KeyError: \"a bug in the allowlist's context\"" in line
    assert "test_decision_failure.py:" in line  # where it was raised
    assert "the original exception goes on" in line


def test_a_policy_that_raises_is_the_users_and_keeps_its_warning(tmp_path: Path) -> None:
    def policy(crash: object) -> None:
        raise ValueError("the user's policy")

    daifu.set_policy(policy)
    try:
        with pytest.warns(RuntimeWarning, match="policy raised ValueError"):
            with pytest.raises(TypeError):
                daifu.transform(fresh(halves))([1, 2, 3, 4])
    finally:
        daifu.set_policy(None)
