"""DLFailureBenchmark end to end: `--smoke` on two cases, a surgery and a retry (`e2e`: minutes, run by CI).

Each case's programs run in their own processes, as in a full run: the buggy program crashes as
expected, the recorded repair is replayed and recovers it, the rules bot is asked in automatic
mode, the checkpoint-retry baseline is timed, and the table and results are written, then drawn.
Both cases run in one benchmark run, as a person would start it (their timings are not what is checked).
`--replay-only` on the surgery case (the fixed, buggy and replay runs, the results written: three
fresh interpreters, 40 s of CPU on a loaded machine) is under `e2e` too; the default run keeps the replay
of recorded repairs through `daifu replay` (tests/test_cli.py, tests/test_seed_programs.py) and the
benchmark's case sets and outcomes in process (tests/test_dlfb_sets.py, tests/test_dlfb_outcomes.py).
The full `--quick` subset (five cases, with the overhead measure) is the benchmark's own, run by hand.
"""

from __future__ import annotations

import importlib.util
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
CASES = {"api01_cnn_eval_slice_float": "Surgery", "nd01_cnn_flaky_checkpoint_write": "Retry"}


HANG_S = 3600
"""Only a hang takes this long (the smoke run: 7 minutes on two cores at load 14)."""


def benchmark(*options: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAIFU_")}
    return subprocess.run([sys.executable, "-m", "DLFailureBenchmark", *options], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=HANG_S)  # fmt: skip


@pytest.mark.torch
@pytest.mark.e2e
def test_a_case_replayed_crashes_as_expected_and_recovers(tmp_path: Path) -> None:
    case = next(iter(CASES))
    done = benchmark("--replay-only", "--case", case, "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (row,) = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))["cases"]
    assert row["id"] == case and row["crashed_as_expected"], row
    assert row["replay"]["recovered"] and [r["decision"] for r in row["replay"]["repairs"]] == [CASES[case]], row
    assert case in (tmp_path / "results.md").read_text(encoding="utf-8")


@pytest.mark.torch
@pytest.mark.e2e
def test_smoke_runs_crash_as_expected_recover_in_replay_and_are_drawn(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAIFU_")}
    cases = [option for case in CASES for option in ("--case", case)]
    done = benchmark("--smoke", *cases, "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert [row["id"] for row in results["cases"]] == list(CASES)
    table = (tmp_path / "results.md").read_text(encoding="utf-8")
    for row in results["cases"]:
        assert row["crashed_as_expected"], row
        assert row["replay"]["recovered"] and row["replay"]["restore_ms"] > 0, row["replay"]
        assert [r["decision"] for r in row["replay"]["repairs"]] == [CASES[row["id"]]]
        assert row["baseline"]["median_s"] > 0 and row["overhead"]["median_percent"] is None  # not measured
        assert row["id"] in table
    if importlib.util.find_spec("matplotlib") is None:
        return
    figure = tmp_path / "figure.png"
    command = ["-m", "DLFailureBenchmark.report", "--results", str(tmp_path / "results.json")]
    drawn = subprocess.run([sys.executable, *command, "--plot", str(figure)], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=HANG_S)  # fmt: skip
    assert drawn.returncode == 0 and f"figure written: {figure}" in drawn.stdout, drawn.stderr
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
