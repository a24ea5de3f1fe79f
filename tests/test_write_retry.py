"""A statement that writes a whole file and failed: retried by what it is, whatever the message says.

A full or failing file system makes `torch.save` raise messages that vary with where the write broke
(`basic_ios::clear: iostream error`, `[enforce fail at inline_container.cc] unexpected pos`,
`PytorchStreamWriter failed writing file`), none of which a transient-fault pattern knows. The site
says enough: a statement that only writes a file, retried, writes the same file again. A trial says
whether the retry succeeds; a write that keeps failing is refused and the program's exception goes on.
Real crashes: writes into `/dev/full` from the installed torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.extras import BOT

for _package in (*BOT, "torch"):
    pytest.importorskip(_package)

import torch
import torch.nn as nn

import daifu
from daifu.core.trial import unavailable
from daifu.report.build import build_report
from daifu.state import RUN
from repairbot.rules import analyse
from repairbot.signs import MAX_RETRIES
from tests.botfixtures import crash_from
from tests.copies import fresh

pytestmark = [pytest.mark.torch,
              pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full to fail a write")]
needs_trials = pytest.mark.skipif(unavailable() is not None, reason=f"no trials: {unavailable()}")


@pytest.fixture
def automatic(tmp_path: Path) -> Callable[[], list[dict[str, Any]]]:
    """Automatic mode with the embedded offline bot, every candidate tried before it is applied."""
    daifu.configure(mode="automatic", approve="auto", workspace=tmp_path / "daifu_workspace")
    before = RUN.recorded
    return lambda: RUN.repairs_since(before)


def save_epochs(model, folder, epochs):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        loss = model(torch.ones(2, 3)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch.save({"model": model.state_dict(), "epoch": epoch}, folder / f"epoch_{epoch}.pt")
    return model


def full_folder(tmp_path: Path, size: int) -> tuple[nn.Module, Path]:
    """A model whose state is `size` floats, and a folder whose epoch-0 file is the full device."""
    (tmp_path / "epoch_0.pt").symlink_to("/dev/full")
    return nn.Linear(3, size), tmp_path


@pytest.mark.parametrize("size", [1, 100_000])
def test_a_failed_write_is_retried_whatever_its_message(tmp_path: Path, size: int) -> None:
    report = build_report(crash_from(save_epochs, *full_folder(tmp_path, size), 2))
    assert report.exception.type == "RuntimeError"
    kinds = [(s.kind, s.code) for s in analyse(report)[1]]
    assert ("retry", "") in kinds
    assert any(kind == "action" and "sleep" in code for kind, code in kinds)


def test_a_write_with_wrong_arguments_is_not_retried(tmp_path: Path) -> None:
    def save(model, folder):
        torch.save(model.state_dict(), folder / "model.pt", pickle_protocol="high")

    report = build_report(crash_from(save, nn.Linear(3, 1), tmp_path))
    assert not any(s.kind == "retry" for s in analyse(report)[1])


@needs_trials
def test_a_write_that_keeps_failing_ends_with_the_programs_own_exception(tmp_path: Path, automatic) -> None:
    # the trial cannot write (its sandbox stops at the program's write), so the retry is taken on trust:
    # bounded, and where the write keeps failing the program's own exception goes on
    model, folder = full_folder(tmp_path, 1)
    with pytest.raises(RuntimeError) as plain:
        save_epochs(nn.Linear(3, 1), folder, 2)
    with pytest.raises(RuntimeError) as repaired:
        daifu.transform(fresh(save_epochs))(model, folder, 2)
    assert str(repaired.value) == str(plain.value)
    repairs = automatic()
    assert 1 <= len(repairs) <= MAX_RETRIES and {r["decision"] for r in repairs} <= {"Retry", "Action"}
