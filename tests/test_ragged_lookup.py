"""A batch stacked from samples looked up by index in a long store: the odd sample named, and left out.

`torch.stack([clips[k] for k in picks])` reads each sample from a store far longer than a batch (every
clip of the data set). The report evaluates the comprehension item by item — one lookup each, whatever
the store's length — so that it can name the clip of another length, and the generator filters the
indices the comprehension walks (`repairbot.generate.ragged`). Real crashes of the installed torch.
"""

from __future__ import annotations

import ast
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
from daifu.report.evaluate import MAX_ITEMS, Evaluator
from repairbot.rules import analyse
from tests.botfixtures import crash_from
from tests.copies import fresh

pytestmark = pytest.mark.torch
needs_trials = pytest.mark.skipif(unavailable() is not None, reason=f"no trials: {unavailable()}")

WIDTH, PER_STEP, CLIPS, CUT = 12, 6, 400, 221
"""Clips of 12 values, 6 a step, 400 in the store; clip 221 lost its last three values."""


def clip_store() -> tuple[list[torch.Tensor], torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    kinds = torch.randint(0, 2, (CLIPS,), generator=generator)
    clips = [torch.randn(WIDTH, generator=generator) + 2.0 * float(kind) for kind in kinds]
    clips[CUT] = clips[CUT][: WIDTH - 3]
    return clips, kinds


def fit_clips(model, clips, kinds, steps):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = 0
    for step in range(steps):
        picks = [(step * PER_STEP + k) * 7 % len(clips) for k in range(PER_STEP)]
        batch = torch.stack([clips[k] for k in picks])
        loss = F.cross_entropy(model(batch), kinds[picks])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        seen += len(picks)
    return seen


def fit_clips_by_hand(model, clips, kinds, steps):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = 0
    for step in range(steps):
        picks = [(step * PER_STEP + k) * 7 % len(clips) for k in range(PER_STEP)]
        picks = [k for k in picks if len(clips[k]) == WIDTH]
        batch = torch.stack([clips[k] for k in picks])
        loss = F.cross_entropy(model(batch), kinds[picks])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        seen += len(picks)
    return seen


def clip_model() -> nn.Module:
    torch.manual_seed(1)
    return nn.Linear(WIDTH, 2)


def test_a_comprehension_looking_up_a_long_store_is_evaluated_one_item_at_a_time() -> None:
    store = list(range(10 * MAX_ITEMS))
    comprehension = ast.parse("[store[k] * 2 for k in picks]", mode="eval").body
    assert Evaluator({"store": store, "picks": [5, 2000]}, {}).value(comprehension) == [10, 4000]
    whole = ast.parse("store[1:]", mode="eval").body  # the store itself is never copied or described
    evaluated = [node for node, _ in Evaluator({"store": store}, {}).evaluate_all(whole)]
    assert evaluated and whole not in evaluated and whole.value not in evaluated


def test_the_report_names_the_batch_whose_clip_from_the_store_is_short() -> None:
    clips, kinds = clip_store()
    report = build_report(crash_from(fit_clips, clip_model(), clips, kinds, 40))
    wrong = [o for o in report.operands if o.wrong]
    assert [o.expression for o in wrong] == ["[clips[k] for k in picks]"]
    assert wrong[0].expect == {"item_shape": [WIDTH]}
    assert [shape for _, shape in wrong[0].facts["odd_items"]] == [[WIDTH - 3]]


def test_the_indices_walked_are_filtered_by_the_length_of_what_they_look_up() -> None:
    clips, kinds = clip_store()
    suggestions = analyse(build_report(crash_from(fit_clips, clip_model(), clips, kinds, 40)))[1]
    assert suggestions[0].kind == "surgery", [s.kind for s in suggestions]
    assert "        picks = [k for k in picks if len(clips[k]) == 12]\n" in suggestions[0].code


@needs_trials
def test_automatic_mode_leaves_the_short_clip_out_of_every_batch_and_trains_the_rest(workspace: Path) -> None:
    clips, kinds = clip_store()
    model = clip_model()
    seen = daifu.transform(fresh(fit_clips))(model, clips, kinds, 140)
    fixed = clip_model()
    assert seen == fit_clips_by_hand(fixed, clips, kinds, 140) == 140 * PER_STEP - 2  # the clip comes twice
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), fixed.parameters()))
    path = workspace / "repairs.jsonl"
    repairs = [entry for line in path.read_text().splitlines() if "decision" in (entry := json.loads(line))]
    assert [entry["decision"] for entry in repairs] == ["Surgery"]
