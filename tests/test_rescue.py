"""The rescue of a crash nothing repairs: saved whole, loaded in a fresh process, never costing the exception."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import daifu  # noqa: E402
from daifu.cli import main as cli  # noqa: E402

pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "rescue_training.py"


def run_example(folder: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "DAIFU_WORKSPACE": str(folder / "ws")}
    env.pop("DAIFU_RECORD", None)
    return subprocess.run([sys.executable, str(EXAMPLE), str(folder / "out"), *arguments], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600)


def test_a_rescued_crash_continues_in_a_fresh_process_to_the_parameters_of_an_uninterrupted_run(
        tmp_path: Path) -> None:
    whole, crashed = tmp_path / "whole", tmp_path / "crashed"
    whole.mkdir(), crashed.mkdir()
    assert run_example(whole).returncode == 0
    done = run_example(crashed, "--crash-at", "6")
    assert done.returncode == 1 and "KeyError: \"batch 6 of epoch 1 has no 'label'\"" in done.stderr
    [said] = [line for line in done.stderr.splitlines() if line.startswith("DaiFu: rescue:")]
    assert "model (module), optimizer (optimizer), scheduler (scheduler) at step=6" in said
    assert str(crashed / "ws" / "rescue" / "1") in said
    manifest = json.loads((crashed / "ws" / "rescue" / "1" / "manifest.json").read_text())
    assert manifest["exception"]["type"] == "KeyError" and manifest["statement"].startswith("raise KeyError")
    assert manifest["position"]["step"] == 6 and manifest["rng"] == ["numpy", "python", "torch"]
    assert not (crashed / "out").exists()  # the crash ended the run before its end

    resumed = run_example(crashed, "--resume")  # a new process: nothing but the rescue carries the state over
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert resumed.stdout.startswith("resuming at step 6")
    expected, got = torch.load(whole / "out" / "final.pt"), torch.load(crashed / "out" / "final.pt")
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[key], got[key]) for key in expected)


@pytest.fixture
def unwritable(tmp_path: Path) -> Iterator[Path]:
    """The workspace's rescue folder, where nobody may write: `chattr +i` for root (whom permissions do not
    stop), else mode 0o555. The rest of the workspace (the record) stays writable."""
    folder = tmp_path / "daifu_workspace" / "rescue"
    folder.mkdir(parents=True)
    if os.geteuid() == 0:
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(folder)]).returncode != 0:
            pytest.skip("running as root on a file system without immutable folders")
        yield folder
        subprocess.run(["chattr", "-i", str(folder)], check=True)
    else:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)


@daifu.transform
def train(model: torch.nn.Module, steps: int, error: BaseException | None = None) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        loss = model(torch.ones(2, 3)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == 2:
            raise error or KeyError("checkpoint_config")


def test_a_rescue_that_cannot_be_written_says_so_and_the_original_exception_goes_on_unchanged(
        unwritable: Path, capsys: pytest.CaptureFixture[str]) -> None:
    error = KeyError("checkpoint_config")
    with pytest.raises(KeyError) as raised:
        train(torch.nn.Linear(3, 1), 5, error)
    assert raised.value is error and raised.value.args == ("checkpoint_config",)
    origin = traceback.extract_tb(raised.value.__traceback__)[-1]
    assert (origin.name, origin.line) == ("train", 'raise error or KeyError("checkpoint_config")')
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("DaiFu: rescue:")]
    assert len(said) == 1 and "could not be saved" in said[0] and str(unwritable) in said[0]
    assert "the exception goes on" in said[0]
    assert list(unwritable.iterdir()) == []


def test_the_rescue_holds_what_the_frame_and_its_globals_held_and_loads_back(tmp_path: Path) -> None:
    model = torch.nn.Linear(3, 1)
    with pytest.raises(KeyError):
        train(model, 5)
    rescue = daifu.rescued()
    assert rescue is not None and rescue.path == tmp_path / "daifu_workspace" / "rescue" / "1"
    assert rescue.manifest["loop"] == ["step"] and rescue.position["step"] == 2
    assert [(o["name"], o["kind"]) for o in rescue.manifest["objects"]] == [("model", "module"),
                                                                           ("optimizer", "optimizer")]
    fresh = rescue.load("model", torch.nn.Linear(3, 1))
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), model.state_dict().values()))
    with pytest.raises(KeyError, match="saved: model, optimizer"):
        rescue.load("scheduler", None)


def test_no_rescue_when_it_is_off_or_nothing_trained_is_in_reach(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    @daifu.transform
    def plain(values: list[int]) -> int:
        return sum(10 // v for v in values)

    with pytest.raises(ZeroDivisionError):
        plain([1, 0])
    daifu.configure(rescue=False)
    with pytest.raises(KeyError):
        train(torch.nn.Linear(3, 1), 5)
    assert not (tmp_path / "daifu_workspace" / "rescue").exists()
    assert "DaiFu: rescue" not in capsys.readouterr().err


def test_a_rescue_past_its_time_is_abandoned_and_never_put_in_place(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    never = threading.Event()

    class Stuck(torch.nn.Linear):
        def state_dict(self, *args: object, **kwargs: object) -> dict[str, object]:  # type: ignore[override]
            never.wait()  # a hook that never returns: blocked on a lock, a network file system
            return {}

    daifu.configure(rescue_seconds=0.5)
    error = KeyError("checkpoint_config")
    with pytest.raises(KeyError) as raised:
        train(Stuck(3, 1), 5, error)
    never.set()
    assert raised.value is error
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("DaiFu: rescue:")]
    assert len(said) == 1 and "abandoned after 0.5 s" in said[0] and "nothing was saved" in said[0]
    assert daifu.rescued() is None


def test_a_device_left_unusable_is_not_touched_and_the_manifest_says_what_was_lost() -> None:
    # The CPU machine has no CUDA context to poison: the meta device stands in for the lost one, with the
    # reason a probe of it would give. Everything on the host is saved; the lost device's state is named.
    from daifu.rescue import collect

    on_host, on_device = torch.nn.Linear(3, 1), torch.nn.Linear(3, 1, device="meta")
    optimizer = torch.optim.SGD(on_host.parameters(), lr=0.1)
    lost = {"meta": "the device's context is unusable after the crash (stand-in)"}
    found = collect.collect({"encoder": on_host, "head": on_device, "optimizer": optimizer, "step": 7}, {}, [],
                            lost, ["step"])
    assert [o["name"] for o in found.objects] == ["encoder", "optimizer"]
    assert found.unsaved == [{"what": "module `head`", "why": f"its state is on meta: {lost['meta']}"}]
    assert set(found.state["objects"]) == {"encoder", "optimizer"} and found.position == {"step": 7}


def test_a_device_whose_synchronisation_fails_or_hangs_is_unusable() -> None:
    from daifu.rescue import devices

    def poisoned() -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nCompile with TORCH_USE_CUDA_DSA")

    hang = threading.Event()
    assert "RuntimeError: CUDA error: an illegal memory access was encountered)" in str(devices.probe(poisoned))
    assert "did not answer within 0.2 s" in str(devices.probe(hang.wait, seconds=0.2))
    hang.set()
    assert devices.probe(lambda: None) is None
    assert devices.unusable() == {}  # this process never initialised CUDA: nothing to probe


def test_daifu_rescue_lists_the_rescues_and_describes_one(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(KeyError):
        train(torch.nn.Linear(3, 1), 5)
    capsys.readouterr()
    assert cli.main(["rescue"]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split()[:3] == ["#", "time", "why"] and "KeyError" in row and "rescue/1" in row
    assert cli.main(["rescue", "1"]) == 0
    text = capsys.readouterr().out
    assert "model: module (torch.nn.modules.linear.Linear, on cpu)" in text
    assert "position: step=2" in text and "rescue.load('optimizer', optimizer)" in text
    assert cli.main(["rescue", "2"]) == 2


def test_rescue_on_names_signals_a_program_can_catch() -> None:
    assert daifu.configure(rescue_on="term, SIGUSR1").rescue_on == ("SIGTERM", "SIGUSR1")
    with pytest.raises(daifu.config.ConfigError, match="SIGKILL is not a signal a program can catch"):
        daifu.configure(rescue_on=["SIGKILL"])
    with pytest.raises(daifu.config.ConfigError, match="not on or off"):
        daifu.configure(rescue="sometimes")
    daifu.configure(rescue_on=None)
