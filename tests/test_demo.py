"""`daifu demo`, the main job on a fresh machine, run as a newcomer runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.extras import BOT

for _package in ("torch", *BOT):
    pytest.importorskip(_package)

pytestmark = pytest.mark.torch


def test_demo_recovers_three_crashes_through_the_service(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "daifu", "demo"], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "repair bot (rules backend) at http://127.0.0.1:" in out
    assert "crash 1: RuntimeError: Parent directory" in out and "os.makedirs(" in out
    assert "crash 2: FloatingPointError: loss is nan" in out and "+ continue" in out
    assert "crash 3: RuntimeError: mat1 and mat2 shapes cannot be multiplied" in out
    assert "+ logits = model(x.flatten(1))" in out
    assert "finished 39 steps" in out  # 4 epochs of 10 batches, the NaN batch passed over
    assert "checkpoints: ['epoch0.pt', 'epoch1.pt', 'epoch2.pt', 'epoch3.pt']" in out
    assert out.count("repaired by") == 3 and out.count("restored in") == 3
