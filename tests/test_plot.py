"""`daifu.log_metric` / `log_checkpoint` and `daifu show --plot`: a run's curve with its repairs, from its own files."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from daifu.cli import main as cli
from daifu.cli import plot
from daifu.store import metrics, repairs

PROGRAM = """
import daifu

daifu.set_policy(lambda crash: daifu.Action("batch = 1.0"))

@daifu.transform
def train(batches):
    loss = 10.0
    for step, batch in enumerate(batches, 1):
        loss = loss * 0.9 + batch          # a None batch crashes here; the policy replaces it
        daifu.log_metric(step, loss)
        if step % 3 == 0:
            daifu.log_checkpoint(step)
    return loss

train([0.0, 0.0, 0.0, 0.0, None, 0.0, 0.0])
"""


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """The workspace of a real run of PROGRAM: 7 steps, checkpoints at 3 and 6, one repair at step 5."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(PROGRAM))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAIFU_")}
    env.update(DAIFU_WORKSPACE=str(tmp_path / "daifu_workspace"), DAIFU_RECORD=str(tmp_path / "record.log"))
    done = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return tmp_path / "daifu_workspace"


def test_the_repair_is_placed_between_its_steps_and_a_restart_redoes_from_the_last_checkpoint(workspace: Path) -> None:
    run = plot.last_run(workspace)
    assert [(line["step"], line["name"]) for line in run if line["name"] == metrics.CHECKPOINT] == [(3, "checkpoint"),
                                                                                                    (6, "checkpoint")]
    assert [line["repairs"] for line in run if line["name"] == "loss"] == [0, 0, 0, 0, 1, 1, 1]
    [repair] = plot.place(run, repairs.all_repairs(workspace))
    assert (repair.number, repair.decision, repair.step) == (1, "Action", 4.5)  # after step 4, before step 5
    assert repair.redo_steps == 1 and repair.redo_s >= 0  # from the checkpoint of step 3 to step 4
    assert repair.startup_s > 0 and repair.restore_ms is not None and repair.restore_ms > 0


def test_show_plot_draws_the_run(workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("matplotlib is not installed (the daifu[plot] extra)")
    figure = tmp_path / "run.png"
    assert cli.main(["show", "--record", str(workspace), "--plot", str(figure)]) == 0
    assert f"Figure written to {figure}" in capsys.readouterr().out
    assert figure.read_bytes()[:4] == b"\x89PNG"


def test_show_plot_without_metrics_says_what_to_call(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["show", "--record", str(empty), "--plot", str(tmp_path / "run.png")]) == 1
    assert "call daifu.log_metric(step, loss) in the training loop" in capsys.readouterr().err
    assert not (tmp_path / "run.png").exists()
