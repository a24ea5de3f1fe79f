"""A crash nothing repairs in a 2-rank torch.distributed job (gloo, CPU, torchrun): each rank saves its shard."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import daifu  # noqa: E402

# A 2-rank torchrun job: the default run keeps the rescue in one process (tests/test_rescue.py) and the
# 2-rank repair (tests/test_distributed.py); this one runs under e2e.
pytestmark = [pytest.mark.torch, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "rescue_training.py"


def test_every_rank_saves_its_shard_and_the_leaders_manifest_names_them_all(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "DAIFU_WORKSPACE": str(tmp_path / "ws"),
           "DAIFU_DIST_GRACE": "60"}  # under load the ranks reach the shared crash seconds apart
    env.pop("DAIFU_RECORD", None)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone", str(EXAMPLE),
               str(tmp_path / "out"), "--crash-at", "6"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode != 0 and "KeyError" in done.stderr
    folder = tmp_path / "ws" / "rescue" / "1"
    job = json.loads((folder / "manifest.json").read_text())
    assert job["shards"] == {"0": "rank0", "1": "rank1"} and job["world_size"] == 2 and job["rank"] == 0
    assert (job["exception"]["type"], job["line"]) == ("KeyError", 48)
    shards = {rank: daifu.rescued(tmp_path / "ws", rank=rank) for rank in (0, 1)}
    for rank, shard in shards.items():
        assert shard is not None and shard.path == folder / f"rank{rank}"
        assert shard.manifest["rank"] == rank and shard.position["step"] == 6
        assert set(shard.objects) == {"model", "optimizer", "scheduler"}
    # the gradients are averaged across ranks: both shards hold the same model
    model = [shards[rank].objects["model"] for rank in (0, 1)]
    assert all(torch.equal(model[0][key], model[1][key]) for key in model[0])
    listed = subprocess.run([sys.executable, "-m", "daifu", "rescue", "--workspace", str(tmp_path / "ws"), "1"],
                            env=env, capture_output=True, text=True, timeout=300)
    assert "shards: rank 0 saved, rank 1 saved" in listed.stdout
