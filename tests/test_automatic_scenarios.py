"""Seven kinds of training crash, each repaired in situ by the rules backend of a real repair bot.

Every test runs a small PyTorch training loop (generated data, CPU, a few dozen steps at most)
that crashes on a bug people write. DaiFu runs in automatic mode with `approve="auto"` and asks
a real repair-bot server (rules backend, on a loopback port, started once for this module). Each
test then checks that

- the run finished, with exactly the optimizer steps it should have taken (Adam's own step
  count, and the loop's counter): none lost to the crash, none taken twice;
- the crash was caught once, at the expected line, with the expected exception type, and
  decided by the bot (`daifu.state.RUN.history`), whose answer came over HTTP from the rules
  backend (the workspace's `repairbot_suggestions.jsonl`);
- the result is what the fixed loop gives: the same parameters when the fix leaves the
  arithmetic as it was, the same final loss within a tolerance when it does not.

The buggy loops are plain functions vaccinated afresh by each test (`daifu.transform(fresh(fn))`), so a
surgery in one test never leaks into another; each has a hand-fixed twin for the comparison.
"""

# ruff: noqa: E402
from __future__ import annotations

import inspect
import json
import os
import threading
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

import pytest

from tests.extras import BOT

for _package in (*BOT, "numpy"):
    pytest.importorskip(_package)

import httpx
import numpy as np

import daifu
from daifu.state import RUN
from repairbot.backends.base import Answer
from repairbot.backends.rules import RulesBackend
from repairbot.server import start_in_thread
from tests.botfixtures import report_of
from tests.copies import fresh

pytestmark = pytest.mark.torch

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional


# -- the service and the automatic mode ------------------------------------------------------------


def bot_answers(tmp_path: Path) -> list[dict[str, Any]]:
    """The bot's answers DaiFu recorded in this test's workspace."""
    path = tmp_path / "daifu_workspace" / "repairbot_suggestions.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def line_of(fn: Callable[..., Any], text: str) -> int:
    """The file line of the only line of `fn`'s source that contains `text`."""
    lines, first = inspect.getsourcelines(fn)
    hits = [first + i for i, line in enumerate(lines) if text in line]
    assert len(hits) == 1, (text, hits)
    return hits[0]


def assert_repaired_once(
    repairs: list[dict[str, Any]],
    tmp_path: Path,
    bot_url: str,
    fn: Callable[..., Any],
    text: str,
    exception: str,
    decision: str,
) -> dict[str, Any]:
    """One crash, at the line of `fn` holding `text`, raising `exception`, repaired by the bot with `decision`."""
    assert len(repairs) == 1, [(r["exception_type"], r["line"], r["decision"]) for r in repairs]
    repair = RUN.history[-1]
    assert repair is repairs[0]
    assert repair["exception_type"] == exception, repair["exception_message"]
    assert repair["line"] == line_of(fn, text) and repair["function"] == fn.__qualname__
    assert repair["decision"] == decision and repair["decided_by"] == "automatic" and repair["suggested_by"] == "bot", repair
    assert isinstance(repair["duration_ms"], float) and repair["duration_ms"] > 0
    answers = bot_answers(tmp_path)
    assert len(answers) == 1 and answers[0]["source"] == bot_url  # over HTTP, from the real service
    assert answers[0]["backend"] == "rules" and answers[0]["fallback_reason"] is None
    return repair


# -- data, models, and what to compare -------------------------------------------------------------

FEATURES, CLASSES = 8, 3


def make_data(count: int = 64, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Samples whose class follows a fixed linear rule."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(count, FEATURES, generator=generator)
    rule = torch.randn(FEATURES, CLASSES, generator=generator)
    return x, (x @ rule).argmax(dim=1)


def make_model(seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(FEATURES, 16), nn.ReLU(), nn.Linear(16, CLASSES))
    return model, torch.optim.Adam(model.parameters(), lr=1e-2)


def adam_steps(optimizer: torch.optim.Optimizer) -> int:
    """The optimizer's own count of steps, the same for every parameter."""
    steps = {int(state["step"]) for state in optimizer.state.values()}
    assert len(steps) == 1, steps
    return steps.pop()


def same_parameters(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def full_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float(F.cross_entropy(model(x), y))


# -- 1. API misuse ---------------------------------------------------------------------------------


def train_logging_confidence(model, optimizer, x_all, y_all, epochs, confidences):
    step = 0
    for _epoch in range(epochs):
        for start in range(0, len(x_all), 16):
            x, y = x_all[start : start + 16], y_all[start : start + 16]
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step % 5 == 0:
                confidences.append(logits.softmax(dim=1).max(dim=1).values.numpy().mean())
    return step


def train_logging_confidence_fixed(model, optimizer, x_all, y_all, epochs, confidences):
    step = 0
    for _epoch in range(epochs):
        for start in range(0, len(x_all), 16):
            x, y = x_all[start : start + 16], y_all[start : start + 16]
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step % 5 == 0:
                confidences.append(logits.softmax(dim=1).max(dim=1).values.detach().numpy().mean())
    return step


def test_numpy_on_a_graph_tensor_is_detached_and_the_step_is_not_taken_again(automatic, tmp_path, bot_url) -> None:
    x, y = make_data()
    model, optimizer = make_model()
    confidences: list[float] = []
    steps = daifu.transform(fresh(train_logging_confidence))(model, optimizer, x, y, 3, confidences)

    repair = assert_repaired_once(
        automatic(), tmp_path, bot_url, train_logging_confidence, ".numpy().mean()", "RuntimeError", "Surgery"
    )
    assert ".values.detach().numpy().mean()" in repair["code"]
    assert steps == 12 and adam_steps(optimizer) == 12  # the crash came after step 5's update: not redone
    fixed_model, fixed_optimizer = make_model()
    fixed_confidences: list[float] = []
    train_logging_confidence_fixed(fixed_model, fixed_optimizer, x, y, 3, fixed_confidences)
    assert same_parameters(model, fixed_model) and confidences == fixed_confidences and len(confidences) == 2


def train_with_monitoring(model, optimizer, x_all, y_all, epochs, monitor_losses):
    monitor_size = len(x_all) / 4
    step = 0
    for _epoch in range(epochs):
        for start in range(0, len(x_all), 16):
            loss = F.cross_entropy(model(x_all[start : start + 16]), y_all[start : start + 16])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
        with torch.no_grad():
            monitor_losses.append(F.cross_entropy(model(x_all[:monitor_size]), y_all[:monitor_size]).item())
    return step


def train_with_monitoring_fixed(model, optimizer, x_all, y_all, epochs, monitor_losses):
    monitor_size = len(x_all) // 4
    step = 0
    for _epoch in range(epochs):
        for start in range(0, len(x_all), 16):
            loss = F.cross_entropy(model(x_all[start : start + 16]), y_all[start : start + 16])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
        with torch.no_grad():
            monitor_losses.append(F.cross_entropy(model(x_all[:monitor_size]), y_all[:monitor_size]).item())
    return step


def test_float_from_true_division_used_as_a_slice_index_becomes_an_int(automatic, tmp_path, bot_url) -> None:
    x, y = make_data()
    model, optimizer = make_model()
    monitor: list[float] = []
    steps = daifu.transform(fresh(train_with_monitoring))(model, optimizer, x, y, 3, monitor)

    repair = assert_repaired_once(
        automatic(), tmp_path, bot_url, train_with_monitoring, "x_all[:monitor_size]", "TypeError", "Surgery"
    )
    assert "x_all[:int(monitor_size)]" in repair["code"]
    assert steps == 12 and adam_steps(optimizer) == 12
    fixed_model, fixed_optimizer = make_model()
    fixed_monitor: list[float] = []
    train_with_monitoring_fixed(fixed_model, fixed_optimizer, x, y, 3, fixed_monitor)
    assert same_parameters(model, fixed_model) and monitor == fixed_monitor and len(monitor) == 3


# -- 2. Tensor mismatch ----------------------------------------------------------------------------


def jitter(x, epoch):
    """Input noise from epoch 1 on, made with NumPy (whose default dtype is float64)."""
    if epoch == 0:
        return x
    noise = np.random.default_rng(epoch).normal(0.0, 0.05, size=tuple(x.shape))
    return torch.from_numpy(x.numpy() + noise)


def train_with_jitter(model, optimizer, x_all, y_all, epochs):
    step = 0
    for epoch in range(epochs):
        for start in range(0, len(x_all), 16):
            x = jitter(x_all[start : start + 16], epoch)
            logits = model(x)
            loss = F.cross_entropy(logits, y_all[start : start + 16])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
    return step


def train_with_jitter_fixed(model, optimizer, x_all, y_all, epochs):
    step = 0
    for epoch in range(epochs):
        for start in range(0, len(x_all), 16):
            x = jitter(x_all[start : start + 16], epoch)
            logits = model(x.float())
            loss = F.cross_entropy(logits, y_all[start : start + 16])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
    return step


def test_float64_batch_into_a_float32_model_is_converted(automatic, tmp_path, bot_url) -> None:
    x, y = make_data()
    model, optimizer = make_model()
    steps = daifu.transform(fresh(train_with_jitter))(model, optimizer, x, y, 3)

    repair = assert_repaired_once(
        automatic(), tmp_path, bot_url, train_with_jitter, "logits = model(x)", "RuntimeError", "Surgery"
    )
    assert "same dtype" in repair["exception_message"] and ".float()" in repair["code"]
    assert steps == 12 and adam_steps(optimizer) == 12  # the crash was the first step of epoch 1
    fixed_model, fixed_optimizer = make_model()
    train_with_jitter_fixed(fixed_model, fixed_optimizer, x, y, 3)
    assert same_parameters(model, fixed_model)


def train_on_float_labels(model, optimizer, x_all, labels, epochs):
    targets = torch.tensor(labels, dtype=torch.float32)
    step = 0
    for _epoch in range(epochs):
        for start in range(0, len(x_all), 16):
            x, y = x_all[start : start + 16], targets[start : start + 16]
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
    return step


def train_on_float_labels_fixed(model, optimizer, x_all, labels, epochs):
    targets = torch.tensor(labels, dtype=torch.long)
    step = 0
    for _epoch in range(epochs):
        for start in range(0, len(x_all), 16):
            x, y = x_all[start : start + 16], targets[start : start + 16]
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
    return step


def test_float_class_labels_into_cross_entropy_become_long(automatic, tmp_path, bot_url) -> None:
    x, y = make_data()
    labels = y.tolist()
    model, optimizer = make_model()
    steps = daifu.transform(fresh(train_on_float_labels))(model, optimizer, x, labels, 3)

    repair = assert_repaired_once(
        automatic(), tmp_path, bot_url, train_on_float_labels, "cross_entropy(model(x), y)", "RuntimeError", "Surgery"
    )
    assert "F.cross_entropy(model(x), y.long())" in repair["code"]
    assert steps == 12 and adam_steps(optimizer) == 12
    fixed_model, fixed_optimizer = make_model()
    train_on_float_labels_fixed(fixed_model, fixed_optimizer, x, labels, 3)
    assert same_parameters(model, fixed_model)


# -- 3. Out of memory: this program's batch is too big ---------------------------------------------

DEVICE_BATCH_LIMIT = 8
"""Samples the (simulated) GPU fits in one forward pass."""


def guarded_forward(model, x):
    """`model(x)`, on a simulated 80 GB GPU that only fits `DEVICE_BATCH_LIMIT` samples."""
    if x.shape[0] > DEVICE_BATCH_LIMIT:
        raise torch.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which "
            "2.31 GiB is free. Including non-PyTorch memory, this process has 76.86 GiB memory in use. Of the "
            "allocated memory 74.02 GiB is allocated by PyTorch, and 2.21 GiB is reserved by PyTorch but "
            "unallocated. If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
            "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
        )
    return model(x)


def train_from_loader(model, optimizer, loader, epochs, batch_sizes):
    for _epoch in range(epochs):
        for x, y in loader:
            logits = guarded_forward(model, x)
            loss = F.cross_entropy(logits, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            batch_sizes.append(len(x))
    return loader


def test_out_of_memory_halves_the_batch_and_rebuilds_the_loader(automatic, tmp_path, bot_url) -> None:
    x, y = make_data()
    dataset = torch.utils.data.TensorDataset(x, y)
    model, optimizer = make_model()
    batch_sizes: list[int] = []
    loader = torch.utils.data.DataLoader(dataset, batch_size=16, shuffle=False)
    loader = daifu.transform(fresh(train_from_loader))(model, optimizer, loader, 3, batch_sizes)

    repair = assert_repaired_once(
        automatic(), tmp_path, bot_url, train_from_loader, "guarded_forward(model, x)", "OutOfMemoryError", "Action"
    )
    assert "DataLoader(" in repair["code"] and "x = x[:_daifu_half]" in repair["code"]
    assert "y = y[:_daifu_half]" in repair["code"]  # the targets too, or the loss would crash next
    assert "_daifu_half" not in globals()  # the action's helper name did not leak into the module
    assert loader.batch_size == 8
    # The crashed batch trains on its first half (the action's choice); every later batch,
    # this epoch's included, has 8 samples: 7 steps in epoch 0 (56 samples), then 8 per epoch.
    assert batch_sizes == [8] * 23 and adam_steps(optimizer) == 23
    fixed_model, fixed_optimizer = make_model()
    fixed_sizes: list[int] = []
    fixed_loader = torch.utils.data.DataLoader(dataset, batch_size=8, shuffle=False)
    train_from_loader(fixed_model, fixed_optimizer, fixed_loader, 3, fixed_sizes)
    assert fixed_sizes == [8] * 24
    assert full_loss(model, x, y) == pytest.approx(full_loss(fixed_model, x, y), abs=0.05)
    assert full_loss(model, x, y) < 0.7 * full_loss(make_model()[0], x, y)  # it did learn


# -- 4. Out of memory: another process holds the device --------------------------------------------


class SharedDevice:
    """A GPU that another job holds for the first `busy_for` forward passes, then releases."""

    def __init__(self, busy_for: int) -> None:
        self.busy_for = busy_for
        self.calls = 0

    def forward(self, model, x):
        self.calls += 1
        if self.calls <= self.busy_for:
            raise torch.OutOfMemoryError(
                "CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacity of 79.19 GiB of "
                "which 17.06 MiB is free. Process 48211 has 71.35 GiB memory in use. Including non-PyTorch "
                "memory, this process has 7.82 GiB memory in use. Of the allocated memory 7.10 GiB is allocated "
                "by PyTorch, and 201.55 MiB is reserved by PyTorch but unallocated. If reserved but unallocated "
                "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
                "fragmentation.  See documentation for Memory Management  "
                "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
            )
        return model(x)


def train_on_shared_device(model, optimizer, x_all, y_all, epochs, device):
    step = 0
    for _epoch in range(epochs):
        for start in range(0, len(x_all), 16):
            logits = device.forward(model, x_all[start : start + 16])
            loss = F.cross_entropy(logits, y_all[start : start + 16])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
    return step


def test_memory_held_by_another_process_is_retried_once_a_trial_finds_it_free(
    automatic, tmp_path, bot_url, monkeypatch
) -> None:
    x, y = make_data()
    model, optimizer = make_model()
    device = SharedDevice(busy_for=1)  # busy for one call, however long the wait: the wait is noted, not spent
    asked: list[float] = []
    real_sleep = time.sleep

    def noted(seconds: float) -> None:
        asked.append(seconds)
        real_sleep(min(seconds, 0.05))

    with monkeypatch.context() as patched:
        patched.setattr(time, "sleep", noted)
        steps = daifu.transform(fresh(train_on_shared_device))(model, optimizer, x, y, 3, device)

    repair = assert_repaired_once(
        automatic(), tmp_path, bot_url, train_on_shared_device, "device.forward(model", "OutOfMemoryError", "Retry"
    )
    # Retrying at once comes first; its trial, on a copy of the run, found the device free: no wait was spent.
    assert repair["code"] is None and asked == []
    assert [t["verdict"] for t in repair["trials"]][:1] == ["completed"]
    assert bot_answers(tmp_path)[0]["diagnosis"]["category"] == "out_of_memory"
    assert "another process" in bot_answers(tmp_path)[0]["diagnosis"]["explanation"]
    assert steps == 12 and adam_steps(optimizer) == 12 and device.calls == 13  # one refused pass, then 12
    fixed_model, fixed_optimizer = make_model()
    train_on_shared_device(fixed_model, fixed_optimizer, x, y, 3, SharedDevice(busy_for=0))
    assert same_parameters(model, fixed_model)


# -- 5. Path problems ------------------------------------------------------------------------------


def train_with_checkpoints(model, optimizer, x_all, y_all, epochs, checkpoint_dir):
    step = 0
    for epoch in range(epochs):
        for start in range(0, len(x_all), 16):
            loss = F.cross_entropy(model(x_all[start : start + 16]), y_all[start : start + 16])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
        torch.save({"model": model.state_dict(), "step": step}, os.path.join(checkpoint_dir, f"epoch{epoch}.pt"))
    return step


def test_checkpoint_into_a_missing_folder_makes_the_folder(automatic, tmp_path, bot_url) -> None:
    x, y = make_data()
    model, optimizer = make_model()
    checkpoints = tmp_path / "runs" / "exp-1" / "checkpoints"
    steps = daifu.transform(fresh(train_with_checkpoints))(model, optimizer, x, y, 3, str(checkpoints))

    repair = assert_repaired_once(
        automatic(), tmp_path, bot_url, train_with_checkpoints, "torch.save(", "RuntimeError", "Action"
    )
    assert "os.makedirs(" in repair["code"] and "Parent directory" in repair["exception_message"]
    assert steps == 12 and adam_steps(optimizer) == 12
    assert sorted(p.name for p in checkpoints.iterdir()) == ["epoch0.pt", "epoch1.pt", "epoch2.pt"]
    assert [torch.load(checkpoints / f"epoch{e}.pt")["step"] for e in range(3)] == [4, 8, 12]
    fixed_model, fixed_optimizer = make_model()
    fixed_dir = tmp_path / "fixed"
    fixed_dir.mkdir()
    train_with_checkpoints(fixed_model, fixed_optimizer, x, y, 3, str(fixed_dir))
    assert same_parameters(model, fixed_model)
    saved, fixed_saved = torch.load(checkpoints / "epoch0.pt"), torch.load(fixed_dir / "epoch0.pt")
    assert all(torch.equal(saved["model"][k], fixed_saved["model"][k]) for k in fixed_saved["model"])


def test_checkpoint_into_a_missing_folder_beside_the_program_makes_it(automatic, tmp_path, bot_url, monkeypatch) -> None:
    """torch names a one-level relative folder without a separator (`Parent directory checkpoints does not
    exist.`): making it is still the folder the crash asks for, not an effect that needs a person."""
    x, y = make_data()
    model, optimizer = make_model()
    monkeypatch.chdir(tmp_path)
    steps = daifu.transform(fresh(train_with_checkpoints))(model, optimizer, x, y, 3, "checkpoints")

    repair = assert_repaired_once(
        automatic(), tmp_path, bot_url, train_with_checkpoints, "torch.save(", "RuntimeError", "Action"
    )
    assert "os.makedirs('checkpoints'" in repair["code"]
    assert "Parent directory checkpoints does not exist" in repair["exception_message"]
    assert steps == 12 and sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "epoch0.pt", "epoch1.pt", "epoch2.pt"]


def finetune(model, optimizer, x_all, y_all, epochs, pretrained):
    model.load_state_dict(torch.load(pretrained))
    step = 0
    for _epoch in range(epochs):
        for start in range(0, len(x_all), 16):
            loss = F.cross_entropy(model(x_all[start : start + 16]), y_all[start : start + 16])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
    return step


def test_mistyped_checkpoint_path_is_pointed_at_the_file_next_to_it(automatic, tmp_path, bot_url) -> None:
    x, y = make_data()
    folder = tmp_path / "pretrained"
    folder.mkdir()
    torch.save(make_model(seed=7)[0].state_dict(), folder / "backbone-v2.pt")
    (folder / "notes.txt").write_text("trained for 90 epochs\n")
    model, optimizer = make_model()
    steps = daifu.transform(fresh(finetune))(model, optimizer, x, y, 2, str(folder / "backbone_v2.pt"))

    repair = assert_repaired_once(
        automatic(), tmp_path, bot_url, finetune, "torch.load(pretrained)", "FileNotFoundError", "Action"
    )
    assert repair["code"] == f"pretrained = {str(folder / 'backbone-v2.pt')!r}"
    assert steps == 8 and adam_steps(optimizer) == 8
    fixed_model, fixed_optimizer = make_model()
    finetune(fixed_model, fixed_optimizer, x, y, 2, str(folder / "backbone-v2.pt"))
    assert same_parameters(model, fixed_model)


# -- 6. Exceptional data ---------------------------------------------------------------------------


def corrupted_batches(epochs: int) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """Four batches per epoch; batch 2 of epoch 0 and batch 1 of epoch 2 hold a corrupted sample."""
    x, y = make_data()
    batches = []
    for _epoch in range(epochs):
        batches.append([(x[s : s + 16].clone(), y[s : s + 16]) for s in range(0, 64, 16)])
    batches[0][2][0][3, 1] = float("nan")
    batches[2][1][0][0, 0] = float("nan")
    return batches


def train_checked(model, optimizer, batches_per_epoch):
    step = 0
    for batches in batches_per_epoch:
        for x, y in batches:
            loss = F.cross_entropy(model(x), y)
            assert torch.isfinite(loss), f"non-finite loss {loss.item()} after {step} steps"
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
    return step


def train_checked_fixed(model, optimizer, batches_per_epoch):
    step = 0
    for batches in batches_per_epoch:
        for x, y in batches:
            complete = torch.isfinite(x).reshape(len(x), -1).all(1)
            x, y = x[complete], y[complete]
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
    return step


def test_a_corrupted_sample_is_left_out_of_its_batch_and_so_is_the_next_one(automatic, tmp_path, bot_url) -> None:
    """The rest of the batch is good data: the sample holding NaN is left out where the loop binds the batch
    (at the top of its body), for this batch and every later one, rather than the whole batch passed over."""
    model, optimizer = make_model()
    steps = daifu.transform(fresh(train_checked))(model, optimizer, corrupted_batches(3))

    repair = assert_repaired_once(
        automatic(), tmp_path, bot_url, train_checked, "assert torch.isfinite(loss)", "AssertionError", "Surgery"
    )
    assert "x, y = x[_daifu_finite], y[_daifu_finite]\n            loss = F.cross_entropy" in repair["code"]
    assert "non-finite loss nan after 2 steps" in repair["exception_message"]
    assert steps == 12 and adam_steps(optimizer) == 12  # 12 batches, none passed over
    assert all(torch.isfinite(p).all() for p in model.parameters())
    fixed_model, fixed_optimizer = make_model()
    train_checked_fixed(fixed_model, fixed_optimizer, corrupted_batches(3))
    assert same_parameters(model, fixed_model)


# -- 7. Non-deterministic runtime errors -----------------------------------------------------------


class ExperimentTracker:
    """Stands for a remote metrics service whose connection drops on the calls numbered in `drops`."""

    def __init__(self, drops: set[int]) -> None:
        self.drops, self.calls, self.logged = drops, 0, []

    def log(self, step, loss):
        self.calls += 1
        if self.calls in self.drops:
            raise ConnectionResetError(104, "Connection reset by peer")
        self.logged.append((step, loss))


class Collective:
    """Stands for a gradient all-reduce whose first call in `fail_on` times out, as NCCL does."""

    def __init__(self, fail_on: set[int]) -> None:
        self.fail_on, self.calls = fail_on, 0

    def all_reduce_gradients(self, model):
        self.calls += 1
        if self.calls in self.fail_on:
            raise RuntimeError(
                "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, "
                "NumelIn=195, NumelOut=195, Timeout(ms)=600000) ran for 600043 milliseconds before timing out."
            )
        for p in model.parameters():
            p.grad /= 1  # world size 1


class ShardReader:
    """An iterator over batches read from a network file system; the read of batch `fail_at` fails once."""

    def __init__(self, x, y, fail_at: int) -> None:
        self.x, self.y, self.fail_at, self.index, self.failed = x, y, fail_at, 0, False

    def __iter__(self):
        return self

    def __next__(self):
        if self.index * 16 >= len(self.x):
            raise StopIteration
        if self.index == self.fail_at and not self.failed:
            self.failed = True
            raise OSError(5, "Input/output error")
        start = self.index * 16
        self.index += 1
        return self.x[start : start + 16], self.y[start : start + 16]


def train_distributed(model, optimizer, x_all, y_all, epochs, collective, tracker):
    step = 0
    for epoch in range(epochs):
        for x, y in ShardReader(x_all, y_all, fail_at=1 if epoch == 1 else -1):
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            collective.all_reduce_gradients(model)
            optimizer.step()
            step += 1
            tracker.log(step, loss.item())
    return step


def train_distributed_reliable_reader(model, optimizer, x_all, y_all, epochs, collective, tracker):
    step = 0
    for _epoch in range(epochs):
        for x, y in ShardReader(x_all, y_all, fail_at=-1):
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            collective.all_reduce_gradients(model)
            optimizer.step()
            step += 1
            tracker.log(step, loss.item())
    return step


@pytest.mark.parametrize(
    ("collective_fails", "tracker_drops", "text", "exception"),
    [
        ({3}, set(), "collective.all_reduce_gradients(model)", "RuntimeError"),
        (set(), {6}, "tracker.log(step, loss.item())", "ConnectionResetError"),
        (set(), set(), "for x, y in ShardReader(", "OSError"),
    ],
    ids=["collective-timeout", "connection-reset", "io-error-reading-a-batch"],
)
def test_transient_failure_runs_the_statement_again_once_a_trial_passes(
    automatic, tmp_path, bot_url, collective_fails, tracker_drops, text, exception
) -> None:
    x, y = make_data()
    model, optimizer = make_model()
    collective, tracker = Collective(collective_fails), ExperimentTracker(tracker_drops)
    reader_fails = exception == "OSError"
    fn = train_distributed if reader_fails else train_distributed_reliable_reader
    steps = daifu.transform(fresh(fn))(model, optimizer, x, y, 3, collective, tracker)

    repair = assert_repaired_once(automatic(), tmp_path, bot_url, fn, text, exception, "Retry")
    assert repair["code"] is None  # at once: its trial passed, so no wait was spent
    assert repair["kind"] == ("for" if reader_fails else "statement")  # a batch that failed to load: its header
    assert steps == 12 and adam_steps(optimizer) == 12
    assert [s for s, _ in tracker.logged] == list(range(1, 13))  # each step logged once, in order
    assert collective.calls == 12 + len(collective_fails)
    fixed_model, fixed_optimizer = make_model()
    fixed_tracker = ExperimentTracker(set())
    train_distributed_reliable_reader(fixed_model, fixed_optimizer, x, y, 3, Collective(set()), fixed_tracker)
    assert same_parameters(model, fixed_model) and tracker.logged == fixed_tracker.logged


# -- the service: one backend call for identical concurrent reports --------------------------------


class CountingRules(RulesBackend):
    """The rules backend, slowed down and counting its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self._lock = threading.Lock()

    def suggest(self, report: Any, deadline: Any = None) -> Answer:
        with self._lock:
            self.calls += 1
        time.sleep(0.3)  # both requests are in flight while the first is computed
        return super().suggest(report, deadline)


def test_identical_reports_sent_concurrently_cost_one_backend_call() -> None:
    backend = CountingRules()
    url, stop = start_in_thread(backend=backend)
    x, y = make_data()
    model, optimizer = make_model()
    report = report_of(train_logging_confidence, model, optimizer, x, y, 2, [])
    body = {"report": report.model_dump(mode="json")}
    barrier = threading.Barrier(2)
    replies: list[httpx.Response] = []

    def send() -> None:
        with httpx.Client(timeout=10) as client:
            barrier.wait()
            replies.append(client.post(f"{url}/v1/suggest", json=body))

    try:
        threads = [threading.Thread(target=send) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    finally:
        stop()
    assert [r.status_code for r in replies] == [200, 200]
    assert backend.calls == 1
    answers = [r.json() for r in replies]
    assert sorted(a["cached"] for a in answers) == [False, True]
    assert answers[0]["suggestions"] == answers[1]["suggestions"] and answers[0]["suggestions"]
    assert answers[0]["fingerprint"] == answers[1]["fingerprint"]
