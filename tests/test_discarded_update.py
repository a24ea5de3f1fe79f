"""A repair that casts the receiver of an in-place update makes the statement update a copy and throw it
away: the run goes on, healthy, without what the statement did. Automatic mode must not apply it."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import daifu  # noqa: E402
from daifu.decide.discarded_update import discarded_updates  # noqa: E402

CLASSES, SMOOTHING = 4, 0.2


@pytest.mark.parametrize(("code", "flagged"), [
    ("t.float().mul_(0.9)", True),
    ("t.to(torch.float32).mul_(0.9).add_(0.1)", True),
    ("t.clone().clamp_(0, 1)", True),
    ("t.mul_(0.9)", False),  # the held tensor itself
    ("t.view(-1).mul_(0.9)", False),  # a view shares the storage: the update lands in `t`
    ("t = t.float().mul_(0.9)", False),  # the copy is kept
    ("h[0].zero_()", False),
])
def test_an_in_place_update_of_a_copy_is_named(code: str, flagged: bool) -> None:
    reasons = discarded_updates(ast.parse(code).body, first_lineno=10)
    assert bool(reasons) is flagged, reasons
    if flagged:
        assert reasons[0].startswith("line 10: ") and "the statement does nothing" in reasons[0]


def smoothed_training(steps: int, smooth_from: int = 2) -> float:
    """Targets built as integers by `one_hot`, smoothed in place from step `smooth_from` on: the crash of a
    float update of a long tensor. Returns the largest target value seen last, 1 - SMOOTHING + SMOOTHING /
    CLASSES once smoothed."""
    generator = torch.Generator().manual_seed(3)
    model = torch.nn.Linear(6, CLASSES)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    largest = 0.0
    for step in range(steps):
        x = torch.randn(16, 6, generator=generator)
        y = torch.randint(0, CLASSES, (16,), generator=generator)
        target = torch.nn.functional.one_hot(y, CLASSES)
        if step >= smooth_from:
            target.mul_(1 - SMOOTHING).add_(SMOOTHING / CLASSES)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x), target.float())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        largest = float(target.max())
    return largest


def test_automatic_mode_never_applies_a_cast_that_makes_the_smoothing_update_a_copy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    daifu.configure(mode="automatic", approve="auto", bot_url=None, workspace=str(tmp_path / "ws"))
    try:
        largest = daifu.transform(smoothed_training)(12)
    except RuntimeError as error:
        assert "can't be cast to the desired output type Long" in str(error)
        largest = None
    assert largest is None or largest == pytest.approx(1 - SMOOTHING + SMOOTHING / CLASSES), largest
    record = tmp_path / "ws" / "repairs.jsonl"
    for line in record.read_text().splitlines() if record.exists() else []:
        applied = json.loads(line).get("code") or ""
        assert not discarded_updates(ast.parse(applied).body), applied
