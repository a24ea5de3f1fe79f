"""DLFailureBenchmark's quick run: each case crashes as expected and is recovered in replay mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.extras import BOT

for _package in ("torch", *BOT):
    pytest.importorskip(_package)

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.torch
@pytest.mark.slow
def test_quick_run_crashes_and_recovers_in_replay(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAIFU_")}
    done = subprocess.run([sys.executable, "-m", "DLFailureBenchmark", "--quick", "--out", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    rows = results["cases"]
    assert len(rows) >= 5
    assert [r["id"] for r in rows if not r["crashed_as_expected"]] == []
    assert [r["id"] for r in rows if not r["replay"]["recovered"]] == []
    assert all(r["replay"]["restore_ms"] > 0 for r in rows)
    assert all(r["baseline"]["median_s"] for r in rows)
    table = (tmp_path / "results.md").read_text(encoding="utf-8")
    assert all(r["id"] in table for r in rows)
