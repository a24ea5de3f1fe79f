"""Per-sample handling of bad data: the good rows of a batch kept, the bad ones counted, real crashes.

A batch made from a list of samples fails when one sample has another shape (a record cut short by an
interrupted write, a document longer than the model's window); the report names the list and the shape
most of its items have, the generator keeps the good samples (`repairbot.generate.ragged`), and the
account says how many rows were dropped. Skipping the whole batch for one bad sample must not be what
automatic mode applies when such a repair passes its trial.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.extras import BOT

for _package in (*BOT, "torch", "numpy"):
    pytest.importorskip(_package)

import numpy as np
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

FEATURES, BATCH = 6, 16


def applied(workspace: Path) -> list[dict[str, Any]]:
    path = workspace / "repairs.jsonl"
    entries = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [entry for entry in entries if "decision" in entry]  # the repairs, not their accounts


# -- a record cut short in a JSON-lines export --------------------------------------------------------


def make_records(count: int, short_at: int | None) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    records = []
    for index in range(count):
        label = int(rng.integers(0, 3))
        values = (rng.normal(size=FEATURES) + label).round(4).tolist()
        if index == short_at:
            values = values[:-1]  # the write was cut short: the last value is lost
        records.append({"x": values, "y": label})
    return records


def fit_records(model, records):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    rows_trained = 0
    for step in range(len(records) // BATCH):
        chunk = records[step * BATCH:(step + 1) * BATCH]
        x = torch.from_numpy(np.array([r["x"] for r in chunk], dtype=np.float32))
        y = torch.tensor([r["y"] for r in chunk])
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        rows_trained += len(y)
    return rows_trained


def fit_records_fixed(model, records):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    rows_trained = 0
    for step in range(len(records) // BATCH):
        chunk = records[step * BATCH:(step + 1) * BATCH]
        chunk = [r for r in chunk if len(r["x"]) == FEATURES]
        x = torch.from_numpy(np.array([r["x"] for r in chunk], dtype=np.float32))
        y = torch.tensor([r["y"] for r in chunk])
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        rows_trained += len(y)
    return rows_trained


def records_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(FEATURES, 3)


def test_the_report_names_the_list_whose_one_record_is_short() -> None:
    report = build_report(crash_from(fit_records, records_model(), make_records(160, 77)))
    wrong = [o for o in report.operands if o.wrong]
    assert [o.expression for o in wrong] == ['[r["x"] for r in chunk]']
    assert wrong[0].expect == {"item_shape": [FEATURES]}
    assert wrong[0].facts["odd_items"] == [[77 - 4 * BATCH, [FEATURES - 1]]]
    assert "15 of its 16 items have shape (6,); item 13 has shape (5,)" in wrong[0].wrong


def test_the_short_record_is_left_out_before_any_skip_of_the_batch() -> None:
    suggestions = analyse(build_report(crash_from(fit_records, records_model(), make_records(160, 77))))[1]
    assert suggestions[0].kind == "surgery", [s.kind for s in suggestions]
    assert '        chunk = [r for r in chunk if len(r["x"]) == 6]\n' in suggestions[0].code
    kinds = [s.kind for s in suggestions]
    assert "skip_iteration" in kinds and kinds.index("skip_iteration") > 0


@needs_trials
def test_automatic_mode_drops_the_one_record_and_trains_every_other_row(workspace: Path,
                                                                       capfd: pytest.CaptureFixture[str]) -> None:
    records = make_records(160, 77)
    model = records_model()
    rows = daifu.transform(fresh(fit_records))(model, records)
    fixed = records_model()
    assert rows == fit_records_fixed(fixed, records) == 159  # not 144: the batch's 15 good rows trained
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), fixed.parameters()))
    [repair] = applied(workspace)
    assert repair["decision"] == "Surgery" and 'if len(r["x"]) == 6]' in repair["code"]
    said = capfd.readouterr().err
    assert "dropped 1 rows" in said and "passed over 1 sample in 1 step" in said, said


# -- a document longer than the window, in a collate function ---------------------------------------------


MAX_LEN = 8


def documents(step: int, size: int = 8) -> list[tuple[torch.Tensor, int]]:
    generator = torch.Generator().manual_seed(step)
    docs = []
    for index in range(size):
        long = (step, index) == (5, 2)
        length = MAX_LEN + 3 if long else int(torch.randint(3, MAX_LEN + 1, (1,), generator=generator))
        topic = int(torch.randint(0, 2, (1,), generator=generator))
        docs.append((torch.randint(1 + topic * 9, 10 + topic * 9, (length,), generator=generator), topic))
    return docs


def collate(samples):
    padded = []
    for ids, _ in samples:
        if len(ids) < MAX_LEN:
            ids = torch.cat([ids, ids.new_zeros(MAX_LEN - len(ids))])
        padded.append(ids)
    return torch.stack(padded), torch.tensor([topic for _, topic in samples])


def collate_fixed(samples):
    padded = []
    for ids, _ in samples:
        ids = ids[:MAX_LEN]
        if len(ids) < MAX_LEN:
            ids = torch.cat([ids, ids.new_zeros(MAX_LEN - len(ids))])
        padded.append(ids)
    return torch.stack(padded), torch.tensor([topic for _, topic in samples])


def fit_topics(embed, head, steps, make_batch):
    optimizer = torch.optim.SGD([*embed.parameters(), *head.parameters()], lr=0.5)
    seen = 0
    for step in range(steps):
        ids, topics = make_batch(documents(step))
        loss = F.cross_entropy(head(embed(ids).mean(1)), topics)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        seen += len(topics)
    return seen


def topic_model() -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    return nn.Embedding(20, 4), nn.Linear(4, 2)


def test_the_report_names_the_stacked_list_and_the_longer_document() -> None:
    report = build_report(crash_from(collate, documents(5)))
    [wrong] = [o for o in report.operands if o.wrong]
    assert wrong.expression == "padded" and wrong.function == "collate"
    assert wrong.expect == {"item_shape": [MAX_LEN]}
    assert wrong.facts["odd_items"] == [[2, [MAX_LEN + 3]]] and wrong.facts["item_dtype"] == "int64"


@needs_trials
def test_automatic_mode_cuts_the_long_document_in_collate_and_trains_every_document(workspace: Path) -> None:
    embed, head = topic_model()
    seen = daifu.transform(fresh(fit_topics))(embed, head, 10, collate)
    fixed_embed, fixed_head = topic_model()
    assert seen == fit_topics(fixed_embed, fixed_head, 10, collate_fixed) == 80
    for a, b in zip([*embed.parameters(), *head.parameters()], [*fixed_embed.parameters(), *fixed_head.parameters()]):
        assert torch.equal(a, b)
    [repair] = applied(workspace)
    assert repair["decision"] == "Patch" and "padded = [_daifu_item[:8] for _daifu_item in padded]" in repair["code"]


def test_a_float_row_longer_than_the_others_is_left_out_not_cut() -> None:
    """Cutting is for sequences of ids (a window); a row of features with a value too many is not known to
    have lost its last one, so it is left out."""
    rows = [torch.ones(4) for _ in range(6)]
    rows[3] = torch.ones(5)

    def stack_rows(rows):
        return torch.stack(rows)

    suggestions = analyse(build_report(crash_from(stack_rows, rows)))[1]
    codes = [s.code for s in suggestions if s.kind in ("surgery", "patch_function")]
    assert codes and all("[:4]" not in code for code in codes)
    assert any("if len(_daifu_item) == 4]" in code for code in codes), codes


# -- rows holding NaN, found by a finiteness guard -------------------------------------------------------


def fit_gauges(model, table, passes, width):
    """Each window of `width` rows of a gauge table (4 readings, then the target) trains one step."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    fitted = 0
    for cursor in range(0, passes * len(table), width):
        window = table[cursor % len(table):][:width]
        readings, target = window[:, :4], window[:, 4:]
        err = F.mse_loss(model(readings), target)
        if torch.isnan(err):
            raise ValueError(f"NaN error at row {cursor}")
        opt.zero_grad()
        err.backward()
        opt.step()
        fitted += len(window)
    return fitted


def fit_gauges_by_hand(model, table, passes, width):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    fitted = 0
    for cursor in range(0, passes * len(table), width):
        window = table[cursor % len(table):][:width]
        window = window[~torch.isnan(window).any(1)]
        readings, target = window[:, :4], window[:, 4:]
        err = F.mse_loss(model(readings), target)
        if torch.isnan(err):
            raise ValueError(f"NaN error at row {cursor}")
        opt.zero_grad()
        err.backward()
        opt.step()
        fitted += len(window)
    return fitted


def gauge_table() -> torch.Tensor:
    """200 rows; three hold a gauge that read nothing (NaN): two in the window at row 40, one in that at 160."""
    generator = torch.Generator().manual_seed(0)
    readings = torch.randn(200, 4, generator=generator)
    table = torch.cat([readings, readings.sum(1, keepdim=True)], 1)
    table[43, 2] = table[45, 0] = table[161, 4] = float("nan")
    return table


def gauge_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(4, 1)


def test_rows_holding_nan_are_left_out_where_the_batch_is_made_not_at_the_guard() -> None:
    suggestions = analyse(build_report(crash_from(fit_gauges, gauge_model(), gauge_table(), 2, 20)))[1]
    [best] = [s for s in suggestions if "_daifu_finite" in s.code]
    lines = best.code.splitlines()
    made = lines.index("        window = table[cursor % len(table):][:width]")
    assert lines[made + 1:made + 3] == [
        "        _daifu_finite = torch.isfinite(window).reshape(len(window), -1).all(1)",
        "        window = window[_daifu_finite]"]
    kinds = [s.kind for s in suggestions]
    assert kinds.index("skip_iteration") > suggestions.index(best)


@needs_trials
def test_automatic_mode_leaves_out_the_nan_rows_of_every_batch_within_the_budget(
        workspace: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The NaN rows come back in later windows (both passes over the table): the surgery holds for them, and
    the budget weighs the 6 rows it drops in 4 windows by their number (at most a window's 20), not as 4
    windows passed over."""
    model = gauge_model()
    fitted = daifu.transform(fresh(fit_gauges))(model, gauge_table(), 2, 20)
    by_hand = gauge_model()
    assert fitted == fit_gauges_by_hand(by_hand, gauge_table(), 2, 20) == 400 - 6
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), by_hand.parameters()))
    [repair] = applied(workspace)
    assert repair["decision"] == "Surgery" and "window = window[_daifu_finite]" in repair["code"]
    said = capfd.readouterr().err
    assert "passed over 6 samples in 4 steps" in said and "budget" not in said, said


def test_rows_dropped_are_weighed_by_their_number_against_the_batch_not_as_batches_passed_over() -> None:
    from daifu.core.account import Account, Budget, Firing

    unknown_batch = Budget(None, 1, "the crashed batch, once (its samples cannot be told)")
    account = Account(("fit", "train.py", 9), "train.py:9")
    for _ in range(3):  # 5 rows of a 16-row batch, in three batches: 15 rows, less than the one batch allowed
        firing = Firing("rows", 5, held=16)
        assert not unknown_batch.exceeded_by(account, firing)
        account.add(firing)
    assert unknown_batch.exceeded_by(account, Firing("rows", 2, held=16))  # 17 rows: more than a batch
    assert Budget(16, 1, "the crashed batch's 16 samples, once").exceeded_by(account, Firing("skip-iteration", 16))
    skipped = Account(("fit", "train.py", 9), "train.py:9")
    skipped.add(Firing("skip-iteration", None))
    assert unknown_batch.exceeded_by(skipped, Firing("skip-iteration", None))  # a second batch passed over


# -- labels numbered from 1, reached through a parallel assignment -------------------------------------------


def fit_shard(model, xs, ys, steps):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    for step in range(steps):
        x, y = xs[step % len(xs)], ys[step % len(ys)]
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model


def shard() -> tuple[torch.Tensor, torch.Tensor]:
    """Six batches of 12 rows whose labelling tool numbers the 4 classes from 1."""
    generator = torch.Generator().manual_seed(4)
    labels = torch.randint(0, 4, (6, 12), generator=generator)
    centres = torch.randn(4, 5, generator=generator) * 2
    return centres[labels] + 0.3 * torch.randn(6, 12, 5, generator=generator), labels + 1


def test_labels_from_one_are_followed_through_a_parallel_assignment_to_where_they_are_taken() -> None:
    xs, ys = shard()
    torch.manual_seed(5)
    suggestions = analyse(build_report(crash_from(fit_shard, nn.Linear(5, 4), xs, ys, 6)))[1]
    best = next(s for s in suggestions if s.kind == "surgery")
    assert "        x, y = xs[step % len(xs)], ys[step % len(ys)] - 1\n" in best.code, best.code


# -- a batch of one row at the end of every pass, into BatchNorm ------------------------------------------


def fit_normed(model, x_all, y_all, epochs, batch):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    rows_trained = 0
    for epoch in range(epochs):
        order = torch.randperm(len(x_all), generator=torch.Generator().manual_seed(epoch))
        for first in range(0, len(x_all), batch):
            idx = order[first:first + batch]
            loss = F.cross_entropy(model(x_all[idx]), y_all[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            rows_trained += len(idx)
    return rows_trained


def fit_normed_fixed(model, x_all, y_all, epochs, batch):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    rows_trained = 0
    for epoch in range(epochs):
        order = torch.randperm(len(x_all), generator=torch.Generator().manual_seed(epoch))
        for first in range(0, len(x_all), batch):
            idx = order[first:first + batch]
            if len(idx) < 2:
                continue
            loss = F.cross_entropy(model(x_all[idx]), y_all[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            rows_trained += len(idx)
    return rows_trained


def normed_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))


@needs_trials
def test_a_one_row_batch_at_the_end_of_every_pass_is_passed_over_where_it_is_made(
        workspace: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """81 rows in batches of 16: each epoch ends with one row, which BatchNorm refuses in training. Skipping
    the iteration at the crash only moves the crash to the next epoch; the batch passed over where it is
    made holds for all four, and the budget allows it once per pass over the data."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(81, 4, generator=generator)
    y = (x[:, 0] > 0).long()
    model = normed_model()
    rows = daifu.transform(fresh(fit_normed))(model, x, y, 4, 16)
    fixed = normed_model()
    assert rows == fit_normed_fixed(fixed, x, y, 4, 16) == 4 * 80
    trained, hand_fixed = model.state_dict(), fixed.state_dict()
    # BatchNorm counts the batch in `num_batches_tracked` before it refuses it: the crashed statement's own
    # effect, there before DaiFu acts; every parameter and running statistic is the fixed run's
    assert int(trained.pop("1.num_batches_tracked")) == int(hand_fixed.pop("1.num_batches_tracked")) + 1
    assert model.training and all(torch.equal(a, b) for a, b in zip(trained.values(), hand_fixed.values()))
    [repair] = applied(workspace)
    assert repair["decision"] == "Surgery" and "if len(idx) <= 1:\n                continue" in repair["code"]
    said = capfd.readouterr().err
    assert "in 4 steps" in said and "budget" not in said, said


def test_the_budget_holds_once_per_pass_at_the_same_place_of_the_pass_only() -> None:
    from daifu.core.account import Account, Budget, Firing

    budget = Budget(None, 1, "the crashed batch, once (its samples cannot be told)")
    account = Account(("fit", "train.py", 9), "train.py:9")
    first_pass, second_pass = iter(range(3)), iter(range(3))
    trained = {"optimizer_steps": 1}  # each firing keeps the iteration's optimizer step from running
    account.add(Firing("continue", None, loop=first_pass, remaining=0, **trained))  # the first epoch's last batch
    assert not budget.exceeded_by(account, Firing("continue", None, loop=second_pass, remaining=0, **trained))
    assert budget.exceeded_by(account, Firing("continue", None, loop=second_pass, remaining=1, **trained))
    assert budget.exceeded_by(account, Firing("continue", None, loop=first_pass, remaining=0, **trained))  # same pass
    assert budget.exceeded_by(account, Firing("continue", None, loop=second_pass, **trained))  # where: not told
    assert budget.exceeded_by(account, Firing("continue", None, loop=second_pass, remaining=0))  # no training passed
