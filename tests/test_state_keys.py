"""A state dict saved from a wrapper (DataParallel, torch.compile) loaded into the bare model, or back.

`load_state_dict` refuses every key ("Missing key(s) ... Unexpected key(s) ..."). Where one dotted
prefix maps the unexpected keys exactly onto the missing ones, the dict's keys are renamed as it is
loaded, with `strict` kept: the model gets its saved weights. Real crashes from the installed torch.
"""

from __future__ import annotations

from collections.abc import Callable
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
from tests.surgery_lines import changed_lines

pytestmark = pytest.mark.torch
needs_trials = pytest.mark.skipif(unavailable() is not None, reason=f"no trials: {unavailable()}")


class Compiled(nn.Module):
    """Holds a model as `torch.compile`'s wrapper does (`_orig_mod`), so its state's keys carry that prefix;
    without compiling, which would load the compiler into the whole test session."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self._orig_mod = model


def net() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def distil(student, batches, teacher_path, start):
    opt = torch.optim.SGD(student.parameters(), lr=0.1)
    teacher = None
    for step, (x, y) in enumerate(batches):
        if step == start:
            teacher = net()
            teacher.load_state_dict(torch.load(teacher_path, weights_only=True))
        loss = F.cross_entropy(student(x), y)
        if teacher is not None:
            with torch.no_grad():
                soft = teacher(x).softmax(1)
            loss = loss + F.kl_div(student(x).log_softmax(1), soft, reduction="batchmean")
        opt.zero_grad()
        loss.backward()
        opt.step()
    return teacher


def distil_from_state(student, batches, teacher_path, start):
    opt = torch.optim.SGD(student.parameters(), lr=0.1)
    teacher = None
    for step, (x, y) in enumerate(batches):
        if step == start:
            teacher = net()
            state = torch.load(teacher_path, weights_only=True)
            teacher.load_state_dict(state)
        loss = F.cross_entropy(student(x), y)
        if teacher is not None:
            with torch.no_grad():
                soft = teacher(x).softmax(1)
            loss = loss + F.kl_div(student(x).log_softmax(1), soft, reduction="batchmean")
        opt.zero_grad()
        loss.backward()
        opt.step()
    return teacher


def load_into_wrapper(state):
    wrapped = nn.DataParallel(net())
    wrapped.load_state_dict(state)
    return wrapped


def saved_teacher(tmp_path: Path, wrap: Callable[[nn.Module], nn.Module]) -> tuple[Path, dict[str, torch.Tensor]]:
    torch.manual_seed(1)
    teacher = net()
    path = tmp_path / "teacher.pt"
    torch.save(wrap(teacher).state_dict(), path)
    return path, {k: v.clone() for k, v in teacher.state_dict().items()}


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [(torch.randn(8, 4, generator=generator), torch.randint(0, 3, (8,), generator=generator)) for _ in range(4)]


@pytest.mark.parametrize("wrap, prefix", [(nn.DataParallel, "module."), (Compiled, "_orig_mod.")])
def test_a_wrappers_prefix_is_removed_as_the_state_is_loaded(tmp_path: Path, wrap, prefix) -> None:
    path, _ = saved_teacher(tmp_path, wrap)
    torch.manual_seed(0)
    report = build_report(crash_from(distil, net(), batches(), path, 2))
    first = next(s for s in analyse(report)[1] if s.kind == "surgery")
    assert changed_lines(first.code, distil) == [
        f"teacher.load_state_dict({{k.removeprefix({prefix!r}): v for k, v in torch.load(teacher_path, "
        "weights_only=True).items()})"]


def test_a_bare_state_gets_the_wrappers_prefix_as_it_is_loaded() -> None:
    report = build_report(crash_from(load_into_wrapper, net().state_dict()))
    first = next(s for s in analyse(report)[1] if s.kind == "surgery")
    assert changed_lines(first.code, load_into_wrapper) == [
        "wrapped.load_state_dict({'module.' + k: v for k, v in state.items()})"]


def test_keys_that_differ_by_more_than_a_prefix_are_not_renamed() -> None:
    state = {k.replace("0.", "first."): v for k, v in net().state_dict().items()}
    report = build_report(crash_from(load_into_wrapper, state))
    assert not any("removeprefix" in s.code or "+ k:" in s.code for s in analyse(report)[1])


@needs_trials
def test_a_teacher_saved_from_data_parallel_is_loaded_with_its_weights(tmp_path: Path, automatic_embedded) -> None:
    path, weights = saved_teacher(tmp_path, nn.DataParallel)
    torch.manual_seed(0)
    teacher = daifu.transform(fresh(distil_from_state))(net(), batches(), path, 2)
    repairs = automatic_embedded()
    assert [r["decision"] for r in repairs] == ["Surgery"]
    assert changed_lines(repairs[0]["code"], distil_from_state) == [
        "teacher.load_state_dict({k.removeprefix('module.'): v for k, v in state.items()})"]
    assert all(torch.equal(teacher.state_dict()[k], v) for k, v in weights.items())
