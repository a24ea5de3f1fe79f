"""The in-process trial's snapshot (issue 31): what it copies is put back in place, bit for bit."""

from __future__ import annotations

import random

import pytest

from daifu.core import rollback

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch


class Trainer:
    """An object of the program's own, holding trained state and counters."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.1)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=1, gamma=0.5)
        self.steps = 0
        self.history: list[float] = []

    def step(self, x: torch.Tensor) -> None:
        loss = self.model(x).pow(2).mean() + torch.rand(1).sum() * random.random()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        self.steps += 1
        self.history.append(float(loss))


def state(trainer: Trainer) -> dict[str, object]:
    return {
        "model": {k: v.clone() for k, v in trainer.model.state_dict().items()},
        "grads": [None if p.grad is None else p.grad.clone() for p in trainer.model.parameters()],
        "adam": {k: {n: t.clone() for n, t in s.items()} for k, s in trainer.optimizer.state_dict()["state"].items()},
        "lr": [g["lr"] for g in trainer.optimizer.param_groups],
        "epoch": trainer.scheduler.last_epoch,
        "steps": trainer.steps,
        "history": list(trainer.history),
        "rng": (torch.get_rng_state(), random.getstate()),
    }


def same(a: dict[str, object], b: dict[str, object]) -> bool:
    def equal(x: object, y: object) -> bool:
        if isinstance(x, torch.Tensor):
            return isinstance(y, torch.Tensor) and torch.equal(x, y)
        if isinstance(x, dict):
            return isinstance(y, dict) and x.keys() == y.keys() and all(equal(x[k], y[k]) for k in x)
        if isinstance(x, (list, tuple)):
            return isinstance(y, (list, tuple)) and len(x) == len(y) and all(map(equal, x, y))
        return x == y
    return equal(a, b)


def test_a_snapshot_puts_back_the_model_optimizer_scheduler_and_the_programs_own_object() -> None:
    trainer = Trainer()
    trainer.step(torch.randn(8, 3))
    x = torch.randn(8, 3)
    before = state(trainer)
    parameters = list(trainer.model.parameters())
    snapshot = rollback.take({"trainer": trainer}, {"x": x}, {}, None)
    assert isinstance(snapshot, rollback.Snapshot) and snapshot.bytes > 0
    for _ in range(3):
        trainer.step(torch.randn(8, 3))
    trainer.model[0] = torch.nn.Linear(3, 4)  # a layer re-created
    trainer.optimizer.zero_grad(set_to_none=True)
    assert not same(before, state(trainer))
    snapshot.restore()
    assert same(before, state(trainer))
    assert list(trainer.model.parameters()) == parameters  # the same tensor objects: the optimizer's hold


def test_every_part_is_put_back_even_when_one_fails_and_the_failure_is_said() -> None:
    trainer = Trainer()
    before = state(trainer)

    def broken() -> None:
        raise ValueError("cannot")

    snapshot = rollback.take({"trainer": trainer}, {}, {}, None, [broken])
    trainer.step(torch.randn(8, 3))
    with pytest.raises(rollback.RollbackFailed, match="ValueError: cannot"):
        snapshot.restore()
    assert same(before, state(trainer))


def test_no_snapshot_when_it_does_not_fit() -> None:
    trainer = Trainer()
    refused = rollback.take({"trainer": trainer}, {}, {}, 16)
    assert isinstance(refused, str) and refused.startswith("memory: the in-process snapshot needs")


def test_a_graph_built_before_the_snapshot_can_still_be_backpropagated_after_the_rollback() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    kept = model(torch.randn(5, 3)).sum()  # an episode's graph, built before the crash
    snapshot = rollback.take({"model": model, "optimizer": optimizer}, {}, {}, None)
    model(torch.randn(5, 3)).sum().backward()
    optimizer.step()  # the trial changes the weights the kept graph saved, in place
    snapshot.restore()
    optimizer.zero_grad()
    kept.backward()  # the weights are back, and so is autograd's count of their in-place changes
    assert all(p.grad is not None for p in model.parameters())
