"""Preemption: a `rescue_on` signal takes a rescue at the next statement of a vaccinated function, then acts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import daifu  # noqa: E402

pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "rescue_training.py"


def test_sigterm_in_the_middle_of_an_epoch_rescues_and_ends_the_run_with_the_signals_status(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "DAIFU_WORKSPACE": str(tmp_path / "ws")}
    env.pop("DAIFU_RECORD", None)
    command = [sys.executable, str(EXAMPLE), str(tmp_path / "out"), "--rescue-on", "SIGTERM", "--step-seconds", "0.2"]
    job = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert job.stdout is not None
        for line in job.stdout:  # epoch 1 is steps 4 to 7: step 5 is in its middle
            if "step 5 " in line:
                job.send_signal(signal.SIGTERM)
                break
        _, stderr = job.communicate(timeout=300)
    finally:
        job.kill()
    assert job.returncode == -signal.SIGTERM, stderr[-2000:]
    [said] = [line for line in stderr.splitlines() if line.startswith("DaiFu: rescue:")]
    assert said.endswith("SIGTERM then ends the run") and str(tmp_path / "ws" / "rescue" / "SIGTERM") in said
    manifest = json.loads((tmp_path / "ws" / "rescue" / "SIGTERM" / "manifest.json").read_text())
    assert (manifest["why"], manifest["signal"], manifest["function"]) == ("signal", "SIGTERM", "train")
    assert 5 <= manifest["position"]["step"] < 11 and manifest["position"]["epoch"] >= 1
    rescue = daifu.rescued(tmp_path / "ws")
    assert rescue is not None and set(rescue.objects) == {"model", "optimizer", "scheduler"}
    assert not (tmp_path / "out").exists()  # the run ended there


def test_the_rescue_waits_for_the_next_statement_then_the_programs_own_handler_runs(tmp_path: Path) -> None:
    handled: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda number, frame: handled.append(number))
    try:
        daifu.configure(rescue_on=["SIGUSR1"])
        trained = _train(steps=6, signal_at=3)
    finally:
        daifu.configure(rescue_on=None)
        signal.signal(signal.SIGUSR1, previous)
    assert handled == [signal.SIGUSR1]  # after the rescue, as without DaiFu; the run went on to its end
    rescue = daifu.rescued()
    assert rescue is not None and rescue.manifest["signal"] == "SIGUSR1"
    assert rescue.manifest["statement"] == "optimizer.step()" and rescue.position["step"] == 3
    before_step_3 = _train(steps=3, signal_at=None)  # the handler ran inside step 3, before its update
    assert all(torch.equal(a, b) for a, b in zip(rescue.objects["model"].values(), before_step_3.values()))
    assert not all(torch.equal(a, b) for a, b in zip(rescue.objects["model"].values(), trained.values()))


def test_a_signal_outside_any_vaccinated_function_acts_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    handled: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda number, frame: handled.append(number))
    try:
        daifu.configure(rescue_on=["SIGUSR1"])
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0)  # a Python handler runs between bytecodes: by now
    finally:
        daifu.configure(rescue_on=None)
        signal.signal(signal.SIGUSR1, previous)
    assert handled == [signal.SIGUSR1] and daifu.rescued() is None
    assert "SIGUSR1: no vaccinated function is running" in capsys.readouterr().err


def test_the_handlers_follow_the_setting() -> None:
    before = signal.getsignal(signal.SIGUSR2)
    daifu.configure(rescue_on=["SIGUSR2"])
    assert signal.getsignal(signal.SIGUSR2) is not before
    daifu.configure(rescue_on=None)
    assert signal.getsignal(signal.SIGUSR2) is before


@daifu.transform
def _loop(model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int, signal_at: int | None) -> None:
    for step in range(steps):
        loss = model(torch.ones(4, 3)).pow(2).sum()
        optimizer.zero_grad()
        loss.backward()
        if step == signal_at:
            os.kill(os.getpid(), signal.SIGUSR1)
        optimizer.step()


def _train(steps: int, signal_at: int | None) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    _loop(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), steps, signal_at)
    return {key: value.clone() for key, value in model.state_dict().items()}
