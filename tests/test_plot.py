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


def test_show_plot_without_repairs_or_metrics_says_what_to_call(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    needs_matplotlib()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["show", "--record", str(empty), "--plot", str(tmp_path / "run.png")]) == 1
    said = capsys.readouterr().err
    assert "no repairs and no metrics in" in said and "call daifu.log_metric(step, loss) in the training loop" in said
    assert not (tmp_path / "run.png").exists()


UNEDITED = """
import daifu

daifu.set_policy(lambda crash: daifu.Action("batch = 0.5"))

@daifu.transform
def train(batches):
    loss, lost_loss = 8.0, float("inf")
    for batch in batches:
        loss = loss / 2 + batch          # a None batch crashes here; the policy replaces it
    return loss

train([0.0, None, 0.0, None])
"""


@pytest.fixture
def unedited(tmp_path: Path) -> Path:
    """The workspace of a real run that logs no metrics: two repairs, `loss` 4.0 then 1.25 at the crashes."""
    script = tmp_path / "plain.py"
    script.write_text(textwrap.dedent(UNEDITED))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAIFU_")}
    env.update(DAIFU_WORKSPACE=str(tmp_path / "daifu_workspace"), DAIFU_RECORD=str(tmp_path / "record.log"))
    done = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return tmp_path / "daifu_workspace"


def needs_matplotlib() -> None:
    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("matplotlib is not installed (the daifu[plot] extra)")


def test_the_record_keeps_the_loss_values_of_the_crashed_frame_at_each_repair(unedited: Path) -> None:
    recorded = repairs.all_repairs(unedited)
    assert [r["losses"] for r in recorded] == [{"loss": 4.0, "lost_loss": None}, {"loss": 1.25, "lost_loss": None}]


def test_a_loss_is_a_scalar_named_like_one(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from daifu.core import health

    namespace = {"loss": torch.tensor(0.5), "val_loss": 1.5, "loss_history": [1.0], "losses": torch.ones(3),
                 "step": 3.0, "loss_name": "mse"}
    assert health.losses(namespace) == {"loss": 0.5, "val_loss": 1.5}


def test_show_plot_without_metrics_draws_the_repairs_their_losses_and_restore_times(
    unedited: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    needs_matplotlib()
    figure = tmp_path / "run.png"
    assert cli.main(["show", "--record", str(unedited), "--plot", str(figure)]) == 0
    assert f"Figure written to {figure}" in capsys.readouterr().out and figure.read_bytes()[:4] == b"\x89PNG"

    recorded = repairs.all_repairs(unedited)
    drawn = plot.figure(unedited, recorded)
    curve, restores = drawn.axes
    assert curve.get_title() == f"Run {recorded[0]['pid']}: 2 repairs in place (no metrics logged: what DaiFu " \
                                "recorded at each)"
    (loss,) = [line for line in curve.get_lines() if line.get_label() == "loss (in the crashed frame)"]
    assert list(loss.get_xdata()) == [1, 2] and list(loss.get_ydata()) == [4.0, 1.25]
    assert [t.get_text() for t in curve.get_xticklabels()] == [f"#{r['repair']}\n{r['time'][11:19]}" for r in recorded]
    widths = [bar.get_width() for bar in restores.patches]
    assert widths == pytest.approx([r["duration_ms"] / 1000 for r in recorded])
    assert [t.get_text() for t in restores.get_yticklabels()] == ["#1 Action", "#2 Action"]


def test_the_title_counts_one_repair_in_the_singular_and_the_labels_fit_in_their_axes(workspace: Path) -> None:
    needs_matplotlib()
    drawn = plot.figure(workspace, repairs.all_repairs(workspace))
    curve = drawn.axes[0]
    assert curve.get_title().endswith(": 1 repair in place")
    drawn.canvas.draw()
    renderer = drawn.canvas.get_renderer()
    box = curve.get_window_extent(renderer)
    (label,) = [text for text in curve.texts if text.get_text().startswith("#1 Action, ")]
    extent = label.get_window_extent(renderer)
    # inside the axes and clear of the top spine (a label that reaches the spine is drawn over by it: cut)
    assert box.y0 <= extent.y0 and extent.y1 <= box.y1 - 2 and box.x0 <= extent.x0 and extent.x1 <= box.x1
    assert any("(1 step redone)" in text.get_text() for text in drawn.axes[1].texts)
