"""In-process trials (issue 31): a candidate tried on the live objects, then everything put back bit for bit.

Each decision kind is tried in process at a crash, and after each trial the parameters, gradients, optimizer
state, random generators, the locals' containers and the patched function are what they were, to the bit; the
real run that follows ends exactly as a run that never tried anything. A candidate that would write a
checkpoint is stopped before the file exists; a loop over a generator is never advanced by a trial.
"""

from __future__ import annotations

import copy
import random
import sys
import types
from pathlib import Path
from typing import Any

import pytest

import daifu
from daifu.core import cuda, trial
from daifu.core.trial import IN_PROCESS, Outcome

torch = pytest.importorskip("torch")
numpy = pytest.importorskip("numpy")
pytestmark = pytest.mark.torch
nn = torch.nn


SEEN: list[int] = []
"""A module-level list the training appends to: put back too."""


def forward(model: Any, x: Any) -> Any:
    """What the crashed statement calls: the target of the patch decision."""
    return model(x)


def batches() -> list[Any]:
    torch.manual_seed(0)
    found = [torch.randn(8, 4) for _ in range(4)]
    found[1] = torch.randn(8, 5)  # the crash: a batch with a feature too many
    return found


def train(model: Any, optimizer: Any, data: Any, losses: list[float], checkpoint: Path | None = None) -> Any:
    for x in data:
        noise = torch.randn(1) * 0.01 + random.random() * 0.0 + float(numpy.random.rand()) * 0.0
        loss = forward(model, x).pow(2).mean() + noise.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
        SEEN.append(len(losses))
        if checkpoint is not None and len(losses) == 4:
            torch.save(model.state_dict(), checkpoint)
    return model


def state_of(model: Any, optimizer: Any, losses: list[float]) -> dict[str, Any]:
    """Everything a trial may change, copied: to compare bit for bit."""
    return {
        "parameters": [p.detach().clone() for p in model.parameters()],
        "grads": [None if p.grad is None else p.grad.clone() for p in model.parameters()],
        "optimizer": copy.deepcopy(optimizer.state_dict()),
        "torch_rng": torch.get_rng_state(),
        "random": random.getstate(),
        "numpy": numpy.random.get_state()[1].copy(),
        "losses": list(losses),
        "seen": list(SEEN),
        "forward": forward.__code__,
    }


def assert_same(before: dict[str, Any], after: dict[str, Any]) -> None:
    for a, b in zip(before["parameters"], after["parameters"], strict=True):
        assert torch.equal(a, b)
    for a, b in zip(before["grads"], after["grads"], strict=True):
        assert (a is None and b is None) or torch.equal(a, b)
    state_a, state_b = before["optimizer"]["state"], after["optimizer"]["state"]
    assert state_a.keys() == state_b.keys()
    for key in state_a:
        for name in state_a[key]:
            assert torch.equal(torch.as_tensor(state_a[key][name]), torch.as_tensor(state_b[key][name]))
    assert before["optimizer"]["param_groups"] == after["optimizer"]["param_groups"]
    assert torch.equal(before["torch_rng"], after["torch_rng"])
    assert before["random"] == after["random"]
    assert (before["numpy"] == after["numpy"]).all()
    assert before["losses"] == after["losses"]
    assert before["seen"] == after["seen"]
    assert before["forward"] is after["forward"]


def fix(crash: daifu.Crash) -> dict[str, Any]:
    """Every decision kind, each fixing (or not) the batch with a feature too many."""
    old = "loss = forward(model, x).pow(2).mean() + noise.sum()"
    return {
        "retry": daifu.Retry(),
        "skip": daifu.Skip(),
        "skip iteration": daifu.SkipIteration(),
        "action": daifu.Action("x = x[:, :4]"),
        "surgery": daifu.Surgery(crash.source.replace(old, old.replace("(model, x)", "(model, x[:, :4])"))),
        "patch": daifu.Patch(f"{__name__}:forward", "def forward(model, x):\n    return model(x[:, :4])\n"),
    }


def run(trying: bool) -> tuple[Any, list[float], dict[str, Any]]:
    """Train through the crash, repaired by the action; with `trying`, every decision kind is first tried in
    process and the state compared before and after each trial."""
    torch.manual_seed(1)
    random.seed(1)
    numpy.random.seed(1)
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses: list[float] = []
    verdicts: dict[str, Any] = {}

    def policy(crash: daifu.Crash) -> Any:
        decisions = fix(crash)
        if trying:
            for name, decision in decisions.items():
                before = state_of(model, optimizer, losses)
                verdicts[name] = crash.trial(decision, 30.0)
                assert_same(before, state_of(model, optimizer, losses))
        return decisions["action"]

    daifu.set_policy(policy)
    daifu.transform(train)(model, optimizer, batches(), losses)
    return model, losses, verdicts


def test_every_decision_kind_is_tried_in_process_and_rolled_back_bit_for_bit() -> None:
    daifu.configure(trials="inprocess", trial_iterations=2)
    model, losses, verdicts = run(trying=True)
    assert set(verdicts) == {"retry", "skip", "skip iteration", "action", "surgery", "patch"}
    assert all(verdict.kind == IN_PROCESS for verdict in verdicts.values())
    assert verdicts["retry"].outcome is Outcome.RAISED
    for name in ("skip iteration", "action", "surgery", "patch"):
        assert verdicts[name].passed, (name, verdicts[name].describe())
        assert verdicts[name].snapshot_bytes > 0
        assert "in process" in verdicts[name].describe()
    assert len(verdicts["action"].iterations) == 3  # the crashed one, then 2 more on a copy of the list's iterator
    assert sys.gettrace() is None  # the surgery's line counter went with its trial

    daifu.configure(trials="off")
    reference, reference_losses, _ = run(trying=False)
    assert losses == reference_losses  # the real run went on as if nothing had been tried
    for a, b in zip(model.state_dict().values(), reference.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_a_candidate_that_would_write_a_checkpoint_is_stopped_before_the_file_exists(tmp_path: Path) -> None:
    daifu.configure(trials="inprocess", trial_iterations=5)
    checkpoint = tmp_path / "model.pt"
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    found: list[Any] = []

    def policy(crash: daifu.Crash) -> Any:
        found.append(crash.trial(daifu.Action("x = x[:, :4]"), 30.0))
        found.append(checkpoint.exists())
        return daifu.Raise()

    daifu.set_policy(policy)
    with pytest.raises(RuntimeError):
        daifu.transform(train)(model, optimizer, batches(), [], checkpoint)
    verdict, existed = found
    assert verdict.outcome is Outcome.STOPPED_AT_EFFECT, verdict.describe()
    assert "torch.save" in verdict.detail
    assert not existed and not checkpoint.exists()


def applied_after_its_trial(decision: daifu.Decision) -> list[Any]:
    """Install a policy that tries `decision` at each crash, then applies it; the verdicts of its trials."""
    verdicts: list[Any] = []

    def policy(crash: daifu.Crash) -> Any:
        verdicts.append(crash.trial(decision, 30.0))
        return decision

    daifu.set_policy(policy)
    return verdicts


def test_a_trial_never_takes_an_item_from_the_live_runs_generator() -> None:
    daifu.configure(trials="inprocess", trial_iterations=5)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = batches()
    verdicts = applied_after_its_trial(daifu.Action("x = x[:, :4]"))
    losses: list[float] = []
    daifu.transform(train)(model, optimizer, (x for x in data), losses)
    assert len(losses) == len(data)  # every batch reached the real run
    assert verdicts[0].passed and "does not take it from the live run's generator" in verdicts[0].ended


def train_taking_from_its_iterator(model: Any, optimizer: Any, loader: Any, steps: int, taken: list[int],
                                   flaky: Any) -> None:
    it = iter(loader)
    for _step in range(steps):
        batch = next(it)
        taken.append(int(batch[0, 0]))
        loss = model(batch).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        flaky()
        optimizer.step()


def test_a_trial_never_takes_an_item_from_an_iterator_the_program_advances_itself() -> None:
    """minGPT's `batch = next(data_iter)`: the horizon's iterations ran the program's own `next` on the live
    DataLoader iterator, and the real run never trained on the batches the trial took."""
    daifu.configure(trials="inprocess", trial_iterations=5)
    loader = torch.utils.data.DataLoader(torch.arange(40.0).reshape(20, 2), batch_size=1)
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    calls = [0]

    def flaky() -> None:
        calls[0] += 1
        if calls[0] == 4:
            raise ConnectionResetError("collective timed out")

    verdicts = applied_after_its_trial(daifu.Retry())
    taken: list[int] = []
    daifu.transform(train_taking_from_its_iterator)(model, optimizer, loader, 8, taken, flaky)
    assert taken == [0, 2, 4, 6, 8, 10, 12, 14]  # every batch in turn, as without the crash
    assert verdicts[0].passed and "does not take it from the live run's" in verdicts[0].ended


def sample_into(model: Any, path: Path, flaky: Any) -> list[bool]:
    modes = []
    with torch.no_grad():
        with open(path, "w") as out:
            for step in range(6):
                flaky(step)
                y = model(torch.ones(1, 2))
                modes.append(torch.is_grad_enabled())
                out.write(f"{float(y):.3f}\n")
    return modes


def test_a_trial_leaves_the_live_runs_with_statements_open(tmp_path: Path) -> None:
    """A trial that unwound through the `with` blocks the live run had entered closed its file (the real run
    then died on "I/O operation on closed file") and left `no_grad`, so the real run computed with grad on;
    its iterations wrote their lines into the live run's file."""
    daifu.configure(trials="inprocess", trial_iterations=5)
    model = nn.Linear(2, 1)
    fired: list[int] = []

    def flaky(step: int) -> None:
        if step == 2 and not fired:
            fired.append(step)
            raise ConnectionResetError("collective timed out")

    verdicts = applied_after_its_trial(daifu.Retry())
    path = tmp_path / "samples.txt"
    assert daifu.transform(sample_into)(model, path, flaky) == [False] * 6
    assert len(path.read_text().splitlines()) == 6 and verdicts[0].passed, verdicts[0].describe()
    assert "write on the live run's open file" in verdicts[0].detail  # the trial wrote into it before
    assert torch.is_grad_enabled()


def test_an_in_process_snapshot_that_does_not_fit_is_refused_before_anything_runs() -> None:
    daifu.configure(trials="inprocess", trial_memory=64)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    verdicts: list[Any] = []

    def policy(crash: daifu.Crash) -> Any:
        verdicts.append(crash.trial(daifu.Action("x = x[:, :4]"), 30.0))
        return daifu.Raise()

    daifu.set_policy(policy)
    with pytest.raises(RuntimeError):
        daifu.transform(train)(model, optimizer, batches(), [])
    assert verdicts[0].outcome is Outcome.UNAVAILABLE and verdicts[0].detail.startswith("memory:")


def test_auto_trials_run_in_process_where_cuda_is_initialised(monkeypatch: pytest.MonkeyPatch) -> None:
    assert trial.how()[0] in (trial.FORK, IN_PROCESS)
    monkeypatch.setattr(cuda, "initialised", lambda: True)
    kind, why = trial.how()
    assert kind == IN_PROCESS and "CUDA is initialised" in why
    daifu.configure(trials="fork")
    assert trial.how()[0] is None
    daifu.configure(trials="off")
    assert trial.unavailable() == "trials are turned off (DAIFU_TRIALS=off)"


def weighted(model: Any, optimizer: Any, data: Any, losses: list[float]) -> Any:
    """Per-row weights made for a full batch: the short batch crashes between its forward and its backward,
    so the resumed iteration's backward goes through a graph built before the crash."""
    weights = torch.linspace(1.0, 2.0, 8)
    for x in data:
        per_row = model(x).pow(2).mean(dim=1)
        loss = (per_row * weights).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    return model


WEIGHTED = weighted.__code__
"""`weighted` as written: each run vaccinates a new function of it (a surgery changes the function it was
applied to)."""


def weighted_run(extra: str | None) -> tuple[Any, list[float], list[Any]]:
    """`weighted` through its crash, repaired by the surgery weighting the rows there are; with `extra`,
    that surgery is first tried in process with `extra` (a statement) added before the crashed one."""
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = [torch.randn(8, 4), torch.randn(6, 4), torch.randn(8, 4), torch.randn(8, 4)]
    verdicts: list[Any] = []
    old = "loss = (per_row * weights).mean()"
    new = "loss = (per_row * weights[: len(per_row)]).mean()"

    def policy(crash: daifu.Crash) -> Any:
        fixed = crash.source.replace(old, new)
        if extra is not None:
            indent = " " * 8
            verdicts.append(crash.trial(daifu.Surgery(crash.source.replace(old, f"{extra}\n{indent}{new}")), 30.0))
        return daifu.Surgery(fixed)

    daifu.set_policy(policy)
    losses: list[float] = []
    daifu.transform(types.FunctionType(WEIGHTED, globals(), "weighted"))(model, optimizer, data, losses)
    return model, losses, verdicts


def test_a_trial_leaves_the_graph_built_before_the_crash_whole_for_the_real_backward() -> None:
    daifu.configure(trials="inprocess", trial_iterations=2)
    model, losses, verdicts = weighted_run("pass")
    assert verdicts[0].passed and verdicts[0].kind == IN_PROCESS, verdicts[0].describe()
    daifu.configure(trials="off")
    reference, reference_losses, _ = weighted_run(None)
    assert losses == reference_losses and len(losses) == 4  # the real backward ran through the kept graph
    for a, b in zip(model.state_dict().values(), reference.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_a_trial_still_refuses_a_second_backward_through_the_graph_built_before_the_crash() -> None:
    daifu.configure(trials="inprocess", trial_iterations=2)
    _, losses, verdicts = weighted_run("per_row.sum().backward()")
    assert verdicts[0].outcome is Outcome.RAISED, verdicts[0].describe()
    assert "second time" in verdicts[0].detail  # torch's own words, as the run would have met them
    assert len(losses) == 4  # and the real run, repaired without that backward, is whole
