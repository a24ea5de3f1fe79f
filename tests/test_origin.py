"""The bad value found and traced to where it was made: real crashes from the installed torch.

Each training function below crashes at a statement that only reveals a value made a few statements
up: labels numbered from 1, a tensor made float64 by NumPy, a size divided with `/`, a noise batch
sized by the configured batch size when the last batch is smaller. The crash report evaluates the
faulty statement's operands (`daifu.report.operands`) and names the wrong one; the generator follows
the function's def-use chains back to the statement that made it and proposes the edit there
(`repairbot.generate.origin`). End to end, DaiFu in automatic mode with the embedded offline bot
applies that edit, and the run ends as the hand-fixed program does.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
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
from daifu.report.build import build_report, render_report_text
from daifu.state import RUN
from repairbot.protocol import Suggestion
from repairbot.rules import analyse
from tests.botfixtures import crash_from
from tests.copies import fresh

pytestmark = pytest.mark.torch
needs_trials = pytest.mark.skipif(unavailable() is not None, reason=f"no trials: {unavailable()}")


@pytest.fixture
def automatic(tmp_path: Path) -> Callable[[], list[dict[str, Any]]]:
    """Automatic mode with the embedded offline bot (no URL), every candidate tried before it is applied."""
    daifu.configure(mode="automatic", approve="auto", workspace=tmp_path / "daifu_workspace")
    before = RUN.recorded
    return lambda: RUN.repairs_since(before)


def changed_lines(code: str, fn: Callable[..., Any]) -> list[str]:
    old = {line.strip() for line in inspect.getsource(fn).splitlines()}
    return [line.strip() for line in code.splitlines() if line.strip() and line.strip() not in old]


def first_surgery(suggestions: list[Suggestion]) -> Suggestion:
    return next(s for s in suggestions if s.kind in ("surgery", "patch_function"))


def weights(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


# -- labels numbered from 1 -------------------------------------------------------------------------


def fit_species(classifier, measurements, species_ids, epochs):
    """Class ids come from a table numbered 1..4; the model has 4 outputs."""
    optimizer = torch.optim.SGD(classifier.parameters(), lr=0.2)
    hits = []
    for epoch in range(epochs):
        for first in range(0, len(measurements), 12):
            features = measurements[first : first + 12]
            kinds = torch.from_numpy(species_ids[first : first + 12]).long()
            scores = classifier(features)
            loss = F.cross_entropy(scores, kinds)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            hits.append(int((scores.argmax(dim=1) == kinds).sum()))
    return hits


def fit_species_fixed(classifier, measurements, species_ids, epochs):
    optimizer = torch.optim.SGD(classifier.parameters(), lr=0.2)
    hits = []
    for epoch in range(epochs):
        for first in range(0, len(measurements), 12):
            features = measurements[first : first + 12]
            kinds = torch.from_numpy(species_ids[first : first + 12]).long() - 1
            scores = classifier(features)
            loss = F.cross_entropy(scores, kinds)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            hits.append(int((scores.argmax(dim=1) == kinds).sum()))
    return hits


def species_data() -> tuple[torch.Tensor, np.ndarray]:
    generator = torch.Generator().manual_seed(3)
    ids = np.random.default_rng(3).integers(1, 5, size=48)
    centres = torch.randn(4, 5, generator=generator) * 2
    x = centres[torch.from_numpy(ids - 1)] + 0.3 * torch.randn(48, 5, generator=generator)
    return x, ids


def species_model() -> nn.Module:
    torch.manual_seed(5)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 4))


def test_the_report_names_labels_past_the_loss_classes() -> None:
    x, ids = species_data()
    report = build_report(crash_from(fit_species, species_model(), x, ids, 1))
    wrong = [o for o in report.operands if o.wrong]
    assert [o.expression for o in wrong] == ["kinds"]
    assert wrong[0].expect == {"classes": 4} and (wrong[0].facts["min"], wrong[0].facts["max"]) == (1, 4)
    assert wrong[0].wrong == "operand `kinds`: int64, range 1..4; the loss has 4 classes (0..3)"
    assert "operand `kinds`: int64, range 1..4" in render_report_text(report)


def test_labels_numbered_from_one_are_renumbered_where_they_are_made() -> None:
    x, ids = species_data()
    best = first_surgery(analyse(build_report(crash_from(fit_species, species_model(), x, ids, 1)))[1])
    assert changed_lines(best.code, fit_species) == [
        "kinds = torch.from_numpy(species_ids[first : first + 12]).long() - 1"]


def test_labels_with_a_zero_among_them_are_not_renumbered() -> None:
    x, ids = species_data()
    ids = ids.copy()
    ids[40] = 0  # classes 0..4 in the table: the model is too small, not the labels shifted
    suggestions = analyse(build_report(crash_from(fit_species, species_model(), x, ids, 1)))[1]
    assert not any("- 1" in line for s in suggestions for line in changed_lines(s.code, fit_species))


@needs_trials
def test_labels_from_one_recover_with_the_fixed_programs_accuracy(automatic) -> None:
    x, ids = species_data()
    model = species_model()
    hits = daifu.transform(fresh(fit_species))(model, x, ids, 3)
    repairs = automatic()
    assert [(r["exception_type"], r["decision"]) for r in repairs] == [("IndexError", "Surgery")]
    assert changed_lines(repairs[0]["code"], fit_species) == [
        "kinds = torch.from_numpy(species_ids[first : first + 12]).long() - 1"]
    fixed_model = species_model()
    assert hits == fit_species_fixed(fixed_model, x, ids, 3)
    assert all(torch.equal(a, b) for a, b in zip(weights(model), weights(fixed_model)))


# -- a float64 array from NumPy -------------------------------------------------------------------


class Regressor:
    """Holds its network as an attribute: the call is `self`-free, `reg.body(x)`."""

    def __init__(self) -> None:
        torch.manual_seed(11)
        self.body = nn.Sequential(nn.Linear(3, 6), nn.ReLU(), nn.Linear(6, 1))


def fit_pressure(reg, readings, targets, steps):
    optimizer = torch.optim.Adam(reg.body.parameters(), lr=0.01)
    losses = []
    for step in range(steps):
        window = readings[step * 6 : step * 6 + 6]
        batch = torch.from_numpy(window)
        scaled = batch * 0.1 - 0.05
        estimate = reg.body(scaled).squeeze(1)
        loss = (estimate - targets[step * 6 : step * 6 + 6]).abs().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def fit_pressure_fixed(reg, readings, targets, steps):
    optimizer = torch.optim.Adam(reg.body.parameters(), lr=0.01)
    losses = []
    for step in range(steps):
        window = readings[step * 6 : step * 6 + 6]
        batch = torch.from_numpy(window).float()
        scaled = batch * 0.1 - 0.05
        estimate = reg.body(scaled).squeeze(1)
        loss = (estimate - targets[step * 6 : step * 6 + 6]).abs().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def pressure_data() -> tuple[np.ndarray, torch.Tensor]:
    readings = np.random.default_rng(7).normal(size=(30, 3)) * 4
    return readings, torch.from_numpy(readings.sum(axis=1) * 0.05).float()


def test_a_float64_operand_is_cast_where_numpy_made_it() -> None:
    readings, targets = pressure_data()
    report = build_report(crash_from(fit_pressure, Regressor(), readings, targets, 5))
    wrong = [o for o in report.operands if o.wrong]
    assert [(o.expression, o.expect) for o in wrong] == [("scaled", {"dtype": "float32"})]
    assert "float64; `reg.body` computes in float32" in wrong[0].wrong
    best = first_surgery(analyse(report)[1])
    assert changed_lines(best.code, fit_pressure) == ["batch = torch.from_numpy(window).float()"]


@needs_trials
def test_a_float64_batch_recovers_with_the_fixed_programs_losses(automatic) -> None:
    readings, targets = pressure_data()
    reg = Regressor()
    losses = daifu.transform(fresh(fit_pressure))(reg, readings, targets, 5)
    repairs = automatic()
    assert [r["decision"] for r in repairs] == ["Surgery"]
    assert changed_lines(repairs[0]["code"], fit_pressure) == ["batch = torch.from_numpy(window).float()"]
    fixed = Regressor()
    assert losses == fit_pressure_fixed(fixed, readings, targets, 5)
    assert all(torch.equal(a, b) for a, b in zip(weights(reg.body), weights(fixed.body)))


# -- a size computed with `/` -----------------------------------------------------------------------


def band_energy(spectra, sweeps):
    energies = []
    for sweep in range(sweeps):
        middle = spectra.shape[-1] / 2
        with torch.no_grad():
            if sweep % 2 == 0:
                band = spectra[..., :middle]
            else:
                band = spectra[..., middle:]
            energies.append(round(float(band.pow(2).mean()), 6))
    return energies


def band_energy_fixed(spectra, sweeps):
    energies = []
    for sweep in range(sweeps):
        middle = spectra.shape[-1] // 2
        with torch.no_grad():
            if sweep % 2 == 0:
                band = spectra[..., :middle]
            else:
                band = spectra[..., middle:]
            energies.append(round(float(band.pow(2).mean()), 6))
    return energies


def test_a_float_size_is_floored_where_it_is_divided_in_an_enclosing_block() -> None:
    spectra = torch.randn(2, 3, 16, generator=torch.Generator().manual_seed(1))
    report = build_report(crash_from(band_energy, spectra, 4))
    assert [(o.expression, o.expect) for o in report.operands if o.wrong] == [("middle", {"int": True})]
    best = first_surgery(analyse(report)[1])
    assert changed_lines(best.code, band_energy) == ["middle = spectra.shape[-1] // 2"]


@needs_trials
def test_a_float_size_made_above_is_repaired_once_for_every_use(automatic) -> None:
    spectra = torch.randn(2, 3, 16, generator=torch.Generator().manual_seed(1))
    energies = daifu.transform(fresh(band_energy))(spectra, 4)
    repairs = automatic()
    # one repair, where `middle` is divided: the other slice, run on odd sweeps, never crashes
    assert [r["decision"] for r in repairs] == ["Surgery"]
    assert changed_lines(repairs[0]["code"], band_energy) == ["middle = spectra.shape[-1] // 2"]
    assert energies == band_energy_fixed(spectra, 4)


# -- a tensor sized by the configured batch size ----------------------------------------------------


def critic_steps(generator_net, critic, batches, batch_size, code_size):
    optimizer = torch.optim.SGD(critic.parameters(), lr=0.05)
    margins = []
    for step, real in enumerate(batches):  # each step's codes drawn from its own seed
        codes = torch.randn(batch_size, code_size, generator=torch.Generator().manual_seed(100 + step))
        imagined = generator_net(codes).detach()
        gap = critic(real) - critic(imagined)
        loss = torch.relu(1 - gap).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        margins.append(loss.item())
    return margins


def gan_parts() -> tuple[nn.Module, nn.Module, list[torch.Tensor]]:
    torch.manual_seed(2)
    maker, critic = nn.Linear(3, 7), nn.Sequential(nn.Linear(7, 4), nn.ReLU(), nn.Linear(4, 1))
    data = torch.randn(53, 7, generator=torch.Generator().manual_seed(4))
    return maker, critic, list(data.split(16))  # 16, 16, 16 and a last batch of 5


def test_the_report_names_the_tensor_sized_by_the_configured_batch() -> None:
    maker, critic, batches = gan_parts()
    report = build_report(crash_from(critic_steps, maker, critic, batches, 16, 3))
    wrong = [o for o in report.operands if o.wrong]
    assert [(o.expression, o.expect) for o in wrong] == [("imagined", {"rows": 5, "sized_by": "batch_size"})]


def test_a_size_from_the_configuration_is_taken_from_the_data_where_the_tensor_is_made() -> None:
    maker, critic, batches = gan_parts()
    best = first_surgery(analyse(build_report(crash_from(critic_steps, maker, critic, batches, 16, 3)))[1])
    assert changed_lines(best.code, critic_steps) == [
        "codes = torch.randn(real.size(0), code_size, generator=torch.Generator().manual_seed(100 + step))"]


def real_or_not(critic, batches, batch_size):
    """The targets of a discriminator step sized by the configured batch size: the last batch is smaller."""
    optimizer = torch.optim.SGD(critic.parameters(), lr=0.1)
    losses = []
    for real in batches:
        truth = torch.ones(batch_size, 1)
        scores = critic(real)
        loss = F.binary_cross_entropy_with_logits(scores, truth)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def real_or_not_fixed(critic, batches, batch_size):
    optimizer = torch.optim.SGD(critic.parameters(), lr=0.1)
    losses = []
    for real in batches:
        truth = torch.ones(real.size(0), 1)
        scores = critic(real)
        loss = F.binary_cross_entropy_with_logits(scores, truth)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@needs_trials
def test_targets_sized_by_the_configuration_recover_with_the_fixed_programs_losses(automatic) -> None:
    _, critic, batches = gan_parts()
    losses = daifu.transform(fresh(real_or_not))(critic, batches, 16)
    repairs = automatic()
    assert [r["decision"] for r in repairs] == ["Surgery"]
    assert changed_lines(repairs[0]["code"], real_or_not) == ["truth = torch.ones(real.size(0), 1)"]
    _, fixed_critic, _ = gan_parts()
    assert losses == real_or_not_fixed(fixed_critic, batches, 16)
    assert all(torch.equal(a, b) for a, b in zip(weights(critic), weights(fixed_critic)))


# -- the evaluation is safe ----------------------------------------------------------------------------


class Noisy:
    """An object whose attribute reads and conversions have effects: none may run for a report."""

    calls: list[str] = []

    @property
    def width(self) -> float:
        Noisy.calls.append("width")
        return 2.5

    def __getattr__(self, name: str) -> Any:
        Noisy.calls.append(name)
        return 2.5

    def __len__(self) -> int:
        Noisy.calls.append("len")
        return 3


def reads_with_effects(values, holder, norm):
    for _ in range(2):
        crop = values[: holder.width + len(holder) + holder.missing + torch.rand(1).item()]
        pooled = norm(crop)
    return pooled


def test_operands_are_evaluated_without_running_user_code_randomness_or_layers() -> None:
    norm = nn.BatchNorm1d(4)
    crash = crash_from(reads_with_effects, torch.ones(6, 4), Noisy(), norm)  # the program itself reads them
    Noisy.calls.clear()
    seed_state = torch.random.get_rng_state()
    running = norm.running_mean.clone()
    report = build_report(crash)
    assert Noisy.calls == []  # no property, no __getattr__, no __len__ of the program's
    assert torch.equal(torch.random.get_rng_state(), seed_state)  # `torch.rand` was not evaluated
    assert torch.equal(norm.running_mean, running)
    evaluated = {o.expression for o in report.operands}
    assert "values" in evaluated and not evaluated & {"holder.width", "len(holder)", "holder.missing",
                                                      "torch.rand(1)", "torch.rand(1).item()"}
