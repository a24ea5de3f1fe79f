"""In-situ recovery in a 2-rank torch.distributed job (gloo, CPU), launched by torchrun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "examples" / "distributed_training.py"


GRACE_S = 20
"""How long a rank that crashed waits for the leader to say it met the same crash. Under load the ranks
of one step may reach it seconds apart (rank 0 saves a checkpoint just before the shared crash)."""
ALONE_GRACE_S = 1
"""The same wait where the leader never crashes: all of it is spent before the rank decides alone."""
PROCESS_GROUP_TIMEOUT_S = 300
"""The example's `init_process_group` timeout: a job that ends before it did not wait for one."""


def launch(scenario: str, folder: Path, grace: float = GRACE_S) -> subprocess.CompletedProcess[str]:
    """Run the example under torchrun. `--standalone` serves the rendezvous on a port the OS picks when it
    binds it (no free port guessed, then raced for); the limits are generous, so that a loaded machine
    (ranks importing torch a minute apart) is slow, not failing."""
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "DAIFU_DIST_GRACE": str(grace), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("DAIFU_RECORD", None)  # each rank writes its own record in the job's folder
    env["DAIFU_WORKSPACE"] = str(folder / "daifu_workspace")
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone"]
    return subprocess.run(
        command + [str(JOB), scenario, str(folder / "out")],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def trial_of(folder: Path, rank: int) -> dict:
    return json.loads((folder / "out" / f"trial.rank{rank}.json").read_text())


def parameters(folder: Path, rank: int) -> dict[str, torch.Tensor]:
    return torch.load(folder / "out" / f"rank{rank}.pt")


def repairs(folder: Path, rank: int) -> list[dict]:
    path = folder / "daifu_workspace" / f"repairs.rank{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    folder = tmp_path_factory.mktemp("fixed")
    done = launch("none", folder)
    assert done.returncode == 0, done.stderr[-3000:]
    return parameters(folder, 0)


def assert_same(left: dict[str, torch.Tensor], right: dict[str, torch.Tensor]) -> None:
    assert left.keys() == right.keys()
    for key in left:
        assert torch.allclose(left[key], right[key], atol=1e-6), key


@pytest.mark.e2e  # the default run keeps the one-rank repair
def test_same_bug_on_every_rank_gets_one_surgery_that_all_apply(tmp_path: Path, reference) -> None:
    done = launch("shape", tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rank 0 finished 12 steps" in done.stdout and "rank 1 finished 12 steps" in done.stdout
    assert_same(parameters(tmp_path, 0), parameters(tmp_path, 1))
    assert_same(parameters(tmp_path, 0), reference)
    [leader], [follower] = repairs(tmp_path, 0), repairs(tmp_path, 1)
    assert (leader["decision"], leader["decided_by"], leader["rank"]) == ("Surgery", "policy", 0)
    assert (follower["decision"], follower["decided_by"], follower["rank"]) == ("Surgery", "leader rank", 1)
    assert follower["code"] == leader["code"]
    verdict = trial_of(tmp_path, 0)  # tried on a copy of rank 0, stopped at its all_reduce: the group untouched
    assert (verdict["outcome"], verdict["spoilt"], verdict["discarded"]) == ("stopped at effect", [], [])
    assert "all_reduce" in verdict["detail"]
    shown = subprocess.run(
        [sys.executable, "-m", "daifu", "show"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "DAIFU_WORKSPACE": str(tmp_path / "daifu_workspace"), "PYTHONPATH": str(ROOT)},
    )
    lines = shown.stdout.splitlines()
    assert lines[0].split()[-1] == "rank" and len(lines) == 3, shown.stdout
    assert {line.split()[-1] for line in lines[1:]} == {"0", "1"}


def test_crash_on_one_rank_is_repaired_there_while_the_other_waits(tmp_path: Path) -> None:
    done = launch("rank1", tmp_path, ALONE_GRACE_S)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rank 0 finished 12 steps" in done.stdout and "rank 1 finished 12 steps" in done.stdout
    assert_same(parameters(tmp_path, 0), parameters(tmp_path, 1))
    assert repairs(tmp_path, 0) == []
    [repair] = repairs(tmp_path, 1)
    assert (repair["decision"], repair["decided_by"]) == ("Action", "policy")
    assert repair["exception_type"] == "FloatingPointError"
    verdict = trial_of(tmp_path, 1)  # rank 1's copy ran its step locally and stopped at the collective
    assert verdict["outcome"] == "stopped at effect" and "all_reduce" in verdict["detail"]


@pytest.mark.e2e  # the default run keeps the one-rank repair
def test_transient_all_reduce_fault_is_retried(tmp_path: Path, reference) -> None:
    done = launch("allreduce", tmp_path, ALONE_GRACE_S)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same(parameters(tmp_path, 0), reference)
    assert_same(parameters(tmp_path, 1), reference)
    [repair] = repairs(tmp_path, 1)
    assert (repair["decision"], repair["statement"]) == ("Retry", "all_reduce(parameter.grad)")


@pytest.mark.e2e  # the default run keeps the one-rank repair
def test_unrepairable_crash_ends_the_job_with_the_original_exception(tmp_path: Path) -> None:
    started = time.monotonic()
    done = launch("fatal", tmp_path, ALONE_GRACE_S)
    elapsed = time.monotonic() - started
    assert done.returncode != 0
    assert "[rank1]: KeyError: 'checkpoint_config'" in done.stderr
    assert elapsed < PROCESS_GROUP_TIMEOUT_S  # never a hang: rank 0 learns its peer is gone, no timeout ends it
    assert [r["decision"] for r in repairs(tmp_path, 1)] == ["Raise"]
