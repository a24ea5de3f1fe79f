"""Control repairs chosen by what the faulty statement is (`repairbot.generate.site_control`).

Each test runs a small training loop that crashes for real (the installed torch's own messages) in
automatic mode with `approve="auto"`, against a real repair-bot server (rules backend, loopback),
and compares the result with a plain run of the loop written the right way:

- a data loader whose dataset cannot decode one record: the batch is passed over (`SkipIteration` at
  the loop's header), the next one is fetched from the same loader;
- a loader that is a generator, whose shard cannot be read: a generator that raised is finished, so
  nothing may "fetch the next item" (that would end the epoch silently, a transient I/O fault or not):
  the exception goes on;
- a statement that only prints fails on a metric the first epoch has not made yet: it is skipped, the
  training is the same as without it;
- the last batch holds one sample, which BatchNorm refuses in training: that iteration is passed over,
  the same training as `drop_last=True`;
- a statement that fails on every batch (a bug, not bad data): its batches are not passed over one
  after another (the budget of what a site may pass over, and the trial's horizon, stop it).
"""

# ruff: noqa: E402
from __future__ import annotations

import json
from typing import Any

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

import daifu
from tests.copies import fresh

pytestmark = pytest.mark.torch

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional
data = pytest.importorskip("torch.utils.data")


def model_and_optimizer() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Tanh(), nn.Linear(6, 2))
    return model, torch.optim.SGD(model.parameters(), lr=0.05)


def same_parameters(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


class Shards(data.Dataset):  # type: ignore[misc]
    """Samples stored as JSON records; record `bad` is cut short (it fails to decode), or, with
    `unreadable`, its shard cannot be read at all (an I/O error)."""

    def __init__(self, count: int, bad: int | None, unreadable: bool = False) -> None:
        generator = torch.Generator().manual_seed(11)
        self.x = torch.randn(count, 4, generator=generator)
        self.y = (self.x.sum(1) > 0).long()
        self.records = [json.dumps({"x": row.tolist(), "y": int(label)}) for row, label in zip(self.x, self.y)]
        if bad is not None:
            self.records[bad] = self.records[bad][:37]
        self.bad, self.unreadable = bad, unreadable

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        if self.unreadable and index == self.bad:
            raise OSError(5, f"shard {index // 4}: Input/output error")
        record = json.loads(self.records[index])
        return torch.tensor(record["x"]), torch.tensor(record["y"])


def fit(model, optimizer, loader, epochs):
    steps = 0
    for _epoch in range(epochs):
        for features, labels in loader:
            loss = F.cross_entropy(model(features), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            steps += 1
    return steps


def test_a_sample_the_loader_cannot_make_is_passed_over_with_its_batch(automatic) -> None:
    model, optimizer = model_and_optimizer()
    loader = data.DataLoader(Shards(24, bad=9), batch_size=4)
    steps = daifu.transform(fresh(fit))(model, optimizer, loader, 1)

    repairs = automatic()
    assert [(r["exception_type"], r["decision"], r["decided_by"], r["suggested_by"]) for r in repairs] == [
        ("JSONDecodeError", "SkipIteration", "automatic", "bot")
    ]
    assert steps == 5  # 6 batches, the one holding sample 9 passed over
    plain_model, plain_optimizer = model_and_optimizer()
    kept = [i for i in range(24) if i // 4 != 9 // 4]
    good = Shards(24, bad=None)
    plain = data.DataLoader(data.Subset(good, kept), batch_size=4)
    assert fit(plain_model, plain_optimizer, plain, 1) == 5
    assert same_parameters(model, plain_model)


def batches_of(dataset, size):
    for start in range(0, len(dataset), size):
        items = [dataset[i] for i in range(start, min(start + size, len(dataset)))]
        yield torch.stack([x for x, _ in items]), torch.stack([y for _, y in items])


def test_a_generator_that_raised_is_not_asked_for_another_item(automatic) -> None:
    model, optimizer = model_and_optimizer()
    with pytest.raises(OSError, match="Input/output error"):  # an error the rules retry elsewhere
        daifu.transform(fresh(fit))(model, optimizer, batches_of(Shards(24, bad=9, unreadable=True), 4), 1)
    assert [r["decision"] for r in automatic()] == ["Raise"]


def fit_printing(model, optimizer, x, y, history):
    for epoch in range(4):
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history["loss"].append(loss.item())
        print(f"epoch {epoch}: loss {history['loss'][-1]:.4f}, accuracy {history['accuracy'][-1]:.3f}")
        history.setdefault("accuracy", []).append(float((model(x).argmax(1) == y).float().mean()))
    return history


def fit_quiet(model, optimizer, x, y, history):
    for _epoch in range(4):
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history["loss"].append(loss.item())
        history.setdefault("accuracy", []).append(float((model(x).argmax(1) == y).float().mean()))
    return history


def test_a_print_that_fails_is_skipped_and_training_is_unchanged(automatic) -> None:
    good = Shards(16, bad=None)
    model, optimizer = model_and_optimizer()
    history = daifu.transform(fresh(fit_printing))(model, optimizer, good.x, good.y, {"loss": []})

    repairs = automatic()
    assert [(r["exception_type"], r["decision"], r["decided_by"]) for r in repairs] == [("KeyError", "Skip", "automatic")]
    plain_model, plain_optimizer = model_and_optimizer()
    assert fit_quiet(plain_model, plain_optimizer, good.x, good.y, {"loss": []}) == history
    assert same_parameters(model, plain_model)


def test_a_batch_of_one_into_batch_norm_is_passed_over_like_drop_last(automatic) -> None:
    model, optimizer = model_and_optimizer()
    steps = daifu.transform(fresh(fit))(model, optimizer, data.DataLoader(Shards(9, bad=None), batch_size=4), 1)

    repairs = automatic()
    assert [(r["exception_type"], r["decision"], r["decided_by"], r["suggested_by"]) for r in repairs] == [
        ("ValueError", "SkipIteration", "automatic", "bot")
    ]
    plain_model, plain_optimizer = model_and_optimizer()
    dropped = data.DataLoader(Shards(9, bad=None), batch_size=4, drop_last=True)
    assert steps == fit(plain_model, plain_optimizer, dropped, 1) == 2
    assert same_parameters(model, plain_model)


def fit_misshapen(model, optimizer, batches):
    steps = 0
    for features, labels in batches:
        wide = torch.cat([features, features[:, :1]], dim=1)
        loss = F.cross_entropy(model(wide), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps += 1
    return steps


def test_a_fault_of_every_batch_is_not_passed_over_batch_after_batch(automatic) -> None:
    """The statement fails on every batch (a bug, not bad data): passing over the first batch is offered, and
    what it passes over must not grow batch after batch; the run ends with the program's own exception."""
    model, optimizer = model_and_optimizer()
    good = Shards(16, bad=None)
    batches = [(good.x[i : i + 4], good.y[i : i + 4]) for i in range(0, 16, 4)]
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
        daifu.transform(fresh(fit_misshapen))(model, optimizer, batches)
    skipped = [r for r in automatic() if r["decision"] == "SkipIteration"]
    assert len(skipped) <= 1
