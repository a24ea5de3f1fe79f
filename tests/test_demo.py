"""`daifu demo`, the main job on a fresh machine, run as a newcomer runs it: in a folder of their own."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.extras import BOT

for _package in ("torch", *BOT):
    pytest.importorskip(_package)

pytestmark = [pytest.mark.torch, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent


def demo(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`daifu demo args` started in `folder`, with its own temporary directory, as a user's shell would."""
    temporary = folder.parent / f"{folder.name}-tmp"
    temporary.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAIFU_")}
    env["TMPDIR"] = str(temporary)
    return subprocess.run(
        [sys.executable, "-m", "daifu", "demo", *args], capture_output=True, text=True, cwd=folder, env=env, timeout=300
    )


def readme_transcript() -> str:
    """The demo's own lines in the README's captured transcript (DaiFu's stderr lines left out)."""
    text = (ROOT / "README.md").read_text()
    block = text.split("What the demo prints", 1)[1].split("```text\n", 1)[1].split("\n```", 1)[0]
    return "\n".join(line for line in block.splitlines() if not line.startswith("DaiFu: "))


def shape(text: str) -> list[str]:
    """The lines with their numbers, paths and times blanked: what must not change between runs."""
    blanked = [re.sub(r"/\S*daifu-demo-\S+", "DIR", re.sub(r"\d+(\.\d+)?", "#", line)) for line in text.splitlines()]
    return [line for line in blanked if line.strip()]


def test_demo_trains_through_three_crashes_and_leaves_nothing_behind(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = demo(home)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert 'automatic mode (approve="auto"); its repair bot (rules backend) listens at http://127.0.0.1:' in out
    epochs = [line for line in out.splitlines() if line.startswith("epoch ")]
    assert [line.split(":")[0] for line in epochs] == ["epoch 0", "epoch 1", "epoch 2", "epoch 3"]
    assert epochs[1].startswith("epoch 1: 10 batches, loss ")  # the NaN sample left out, the rest of its batch kept
    assert "Finished 40 of 40 steps, in " in out
    assert "rows a changed statement dropped: passed over 1 sample in 1 step" in done.stderr
    assert "3 crashes repaired in place, no restart" in out
    assert "checkpoints: ['epoch0.pt', 'epoch1.pt', 'epoch2.pt', 'epoch3.pt']" in out
    assert "  1. RuntimeError at demo.py:" in out and "-> Action from the bot" in out
    assert "  2. FloatingPointError at demo.py:" in out and "  3. RuntimeError at demo.py:" in out
    assert "removed now; `daifu demo --keep DIR` keeps them." in out
    assert "Traceback" not in done.stderr
    assert shape(out) == shape(readme_transcript())  # the README's transcript is this output, regenerated
    assert list(home.iterdir()) == []  # no experiment_record.log, no workspace in the current directory
    assert [p.name for p in (tmp_path / "home-tmp").glob("daifu-demo-*")] == []


@pytest.mark.e2e  # the default run keeps the demo itself
def test_demo_keep_leaves_the_record_where_it_says_and_daifu_show_reads_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = demo(home, "--keep", "run")
    assert done.returncode == 0, done.stdout + done.stderr
    kept = home / "run"
    assert sorted(p.name for p in home.iterdir()) == ["run"]
    lines = done.stdout.splitlines()
    assert f"The record: {kept / 'experiment_record.log'}" in lines
    assert " - Program End with Quality Measure " in (kept / "experiment_record.log").read_text().splitlines()[-1]
    show = next(line for line in lines if line.startswith("See the repairs: "))
    command = shlex.split(show.removeprefix("See the repairs: "))
    assert command[:2] == ["daifu", "show"]
    shown = subprocess.run([sys.executable, "-m", "daifu", *command[1:]], capture_output=True, text=True, cwd=home)
    rows = shown.stdout.splitlines()[1:]
    assert [row.split()[6] for row in rows] == ["Action", "Surgery", "Surgery"], shown.stdout + shown.stderr
    assert len((kept / "daifu_workspace" / "metrics.jsonl").read_text().splitlines()) == 40 + 4  # steps, checkpoints
    if importlib.util.find_spec("matplotlib") is None:
        return
    draw = next(line for line in lines if line.startswith("Draw the run:")).removeprefix("Draw the run:")
    drawn = subprocess.run([sys.executable, "-m", "daifu", *shlex.split(draw)[1:]], capture_output=True, text=True,
                           cwd=home)  # fmt: skip
    assert drawn.returncode == 0 and (kept / "run.png").read_bytes()[:4] == b"\x89PNG", drawn.stderr
