"""Samples labelled -1 ("no label") in a classification target: left out of the loss by `ignore_index`.

Real crashes of the installed torch (`cross_entropy` refuses the target -1). The labels read as the
convention only where every class is present beside -1; labels numbered one too low (-1..C-2) are an
offset, and ignoring -1 there would drop a whole class.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.extras import BOT

for _package in (*BOT, "torch"):
    pytest.importorskip(_package)

import torch
import torch.nn as nn
import torch.nn.functional as F

import daifu
from daifu.core.trial import unavailable
from daifu.report.build import build_report
from repairbot.rules import analyse
from tests.botfixtures import crash_from
from tests.copies import fresh

pytestmark = pytest.mark.torch
needs_trials = pytest.mark.skipif(unavailable() is not None, reason=f"no trials: {unavailable()}")

KINDS, WIDTH = 3, 5


def survey(rounds: int, partial_from: int, shift: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Batches of answers; from round `partial_from` every fourth answer was not coded (-1)."""
    generator = torch.Generator().manual_seed(8)
    centres = torch.randn(KINDS, WIDTH, generator=generator) * 2
    found = []
    for r in range(rounds):
        kind = torch.arange(12) % KINDS
        answers = centres[kind] + 0.4 * torch.randn(12, WIDTH, generator=generator)
        coded = kind - shift
        if r >= partial_from:
            coded = torch.where(torch.arange(12) % 4 == 1, torch.full_like(coded, -1), coded)
        found.append((answers, coded))
    return found


def code_answers(head, batches):
    opt = torch.optim.SGD(head.parameters(), lr=0.3)
    total = 0.0
    for answers, coded in batches:
        scores = head(answers)
        loss = F.cross_entropy(scores, coded)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item()
    return total


def code_answers_by_hand(head, batches):
    opt = torch.optim.SGD(head.parameters(), lr=0.3)
    total = 0.0
    for answers, coded in batches:
        scores = head(answers)
        loss = F.cross_entropy(scores, coded, ignore_index=-1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item()
    return total


def head() -> nn.Module:
    torch.manual_seed(4)
    return nn.Linear(WIDTH, KINDS)


def test_a_target_holding_minus_one_beside_every_class_is_given_the_loss_ignore_index() -> None:
    suggestions = analyse(build_report(crash_from(code_answers, head(), survey(6, 3))))[1]
    assert suggestions[0].kind == "surgery", [s.kind for s in suggestions]
    assert "        loss = F.cross_entropy(scores, coded, ignore_index=-1)\n" in suggestions[0].code


def test_labels_numbered_one_too_low_are_not_read_as_unlabeled() -> None:
    suggestions = analyse(build_report(crash_from(code_answers, head(), survey(6, 10, shift=1))))[1]
    assert all("ignore_index" not in (s.code or "") for s in suggestions)


@needs_trials
def test_automatic_mode_trains_the_coded_answers_of_every_partly_coded_round(workspace: Path) -> None:
    model, by_hand = head(), head()
    total = daifu.transform(fresh(code_answers))(model, survey(10, 3))
    assert total == code_answers_by_hand(by_hand, survey(10, 3))
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), by_hand.parameters()))
    path = workspace / "repairs.jsonl"
    [repair] = [entry for line in path.read_text().splitlines() if "decision" in (entry := json.loads(line))]
    assert repair["decision"] == "Surgery" and "ignore_index=-1" in repair["code"]
