"""The example: a real PyTorch loop crashes in epoch 2 and finishes, repaired in situ."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "shape_bug_surgery.py"


def load_example():
    spec = importlib.util.spec_from_file_location("shape_bug_surgery", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_training_crashes_in_epoch_2_and_finishes_with_its_state():
    example = load_example()
    result = example.main(epochs=5)
    history = result["history"]
    steps_per_epoch = len(example.make_data())
    assert result["steps"] == 5 * steps_per_epoch
    assert [step for _epoch, step, _loss in history] == list(range(1, 5 * steps_per_epoch + 1))
    assert [epoch for epoch, _step, _loss in history] == [s // steps_per_epoch for s in range(5 * steps_per_epoch)]
    losses = [loss for _e, _s, loss in history]
    crash_index = 2 * steps_per_epoch  # the first step of epoch 2 crashed and was resumed
    assert losses[crash_index] < losses[0] / 2  # training continued from where it was, not from scratch
    assert sum(losses[-steps_per_epoch:]) < sum(losses[crash_index : crash_index + steps_per_epoch])
    optimizer = result["optimizer"]
    adam_steps = {int(state["step"]) for state in optimizer.state.values()}
    assert adam_steps == {5 * steps_per_epoch}  # one optimizer step per batch: none lost, none repeated
    assert len(example.train.__daifu__.versions) == 2


def test_the_unvaccinated_loop_really_crashes():
    example = load_example()
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
    optimizer = torch.optim.Adam(model.parameters())
    history = []
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
        example.train.__daifu__.plain(model, optimizer, example.make_data(), 3, history)
    assert len(history) == 2 * len(example.make_data())
