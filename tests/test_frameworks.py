"""DaiFu inside the training loops of Hugging Face `Trainer`, Lightning and Accelerate (`--framework`).

Real frameworks on tiny models built in code, on generated data (nothing is downloaded): per framework,
a run with DaiFu gives bit for bit what the run without it gives (losses, steps, parameters, optimizer
and scheduler state); a shape bug in the user's code repaired by a policy's surgery ends in the state
of the fixed program's run; and automatic mode, with the embedded rules engine, repairs the same bug to
that state. Each run starts a framework in a new process
(about a minute on a loaded machine): the tests are `e2e`, and skip when the framework is missing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

PROGRAMS = Path(__file__).parent / "programs" / "frameworks"
ROOT = Path(__file__).parent.parent
TIMEOUT = 600


@dataclass(frozen=True)
class Case:
    """A framework's test program, and the shape bug written into it: `fixed` replaced by `buggy`."""

    module: str
    program: str
    fixed: str
    buggy: str
    error: str


CASES = {
    "hf": Case("transformers", "hf_trainer.py", "F.cross_entropy(shift_logits.reshape(-1, VOCAB)",
               "F.cross_entropy(logits.reshape(-1, VOCAB)", "ValueError"),
    "lightning": Case("lightning", "lightning_module.py", "logits = self.net(x)",
                      "logits = self.net(x.reshape(-1, 4))", "RuntimeError"),
    "accelerate": Case("accelerate", "accelerate_loop.py", "prediction = model(x)",
                       "prediction = model(x.reshape(-1, 4))", "RuntimeError"),
}  # fmt: skip

POLICY = '''
import daifu as _daifu


def _fix(crash):
    """The fix a person would write: the bug's statement as the fixed program has it."""
    if {buggy!r} in crash.source:
        return _daifu.Surgery(crash.source.replace({buggy!r}, {fixed!r}))
    return None


_daifu.set_policy(_fix)

'''


def needs(name: str) -> Case:
    case = CASES[name]
    if importlib.util.find_spec(case.module) is None:
        pytest.skip(f"{case.module} is not installed (pip install 'daifu[frameworks]')")
    return case


def program(tmp_path: Path, case: Case, buggy: bool = False, policy: bool = False) -> Path:
    """The case's program in `tmp_path`, with its bug written in and a policy that fixes it, as asked."""
    shutil.copy(PROGRAMS / "digest.py", tmp_path / "digest.py")
    text = (PROGRAMS / case.program).read_text()
    assert text.count(case.fixed) == 1
    if buggy:
        text = text.replace(case.fixed, case.buggy)
    if policy:
        main = 'if __name__ == "__main__":'
        text = text.replace(main, POLICY.format(buggy=case.buggy, fixed=case.fixed) + main)
    path = tmp_path / case.program
    path.write_text(text)
    return path


def run(script: Path, *daifu_run: str, **env: str) -> tuple[dict[str, Any] | None, subprocess.CompletedProcess[str]]:
    """Run `script` (with `daifu run` and its options when `daifu_run` is given, else with python
    alone); what it wrote, or `None` when it did not end well, and the process."""
    out = script.parent / "result.json"
    out.unlink(missing_ok=True)
    command = [sys.executable, "-m", "daifu", "run", *daifu_run] if daifu_run else [sys.executable]
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                   "DAIFU_WORKSPACE": str(script.parent / "daifu_workspace"), "TOKENIZERS_PARALLELISM": "false",
                   **env}
    done = subprocess.run([*command, str(script), str(out)], capture_output=True, text=True, cwd=script.parent,
                          env=environment, timeout=TIMEOUT)
    return (json.loads(out.read_text()) if done.returncode == 0 and out.exists() else None), done


_fixed_runs: dict[str, dict[str, Any]] = {}


def fixed_run(name: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The fixed program's run without DaiFu: what every other run is compared with (run once)."""
    if name not in _fixed_runs:
        result, done = run(program(tmp_path_factory.mktemp(f"{name}-fixed"), CASES[name]))
        assert result is not None, done.stderr[-3000:]
        _fixed_runs[name] = result
    return _fixed_runs[name]


def repairs(script: Path) -> list[dict[str, Any]]:
    path = script.parent / "daifu_workspace" / "repairs.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("name", sorted(CASES))
def test_no_crash_runs_the_same_with_daifu(name: str, tmp_path: Path,
                                            tmp_path_factory: pytest.TempPathFactory) -> None:
    case = needs(name)
    result, done = run(program(tmp_path, case), "--framework", name)
    assert result is not None, done.stderr[-3000:]
    assert "DaiFu: vaccinated" in done.stderr
    assert result == fixed_run(name, tmp_path_factory)
    assert repairs(tmp_path / case.program) == []


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_policy_surgery_repairs_the_run_in_place(name: str, tmp_path: Path,
                                                   tmp_path_factory: pytest.TempPathFactory) -> None:
    """The bug crashes in the first step; the surgery resumes inside that step, and the run ends with
    the losses, steps, parameters, optimizer and scheduler state of the fixed program's run."""
    case = needs(name)
    script = program(tmp_path, case, buggy=True, policy=True)
    result, done = run(script, "--framework", name)
    assert result is not None, done.stderr[-3000:]
    assert result == fixed_run(name, tmp_path_factory)
    recorded = repairs(script)
    assert [entry["decision"] for entry in recorded if entry.get("decision")] == ["Surgery"]
    assert recorded[0]["exception_type"] == case.error


@pytest.mark.parametrize("name", sorted(CASES))
def test_automatic_mode_repairs_to_the_fixed_state(name: str, tmp_path: Path,
                                                   tmp_path_factory: pytest.TempPathFactory) -> None:
    """The rules engine's generator proposes the edit that undoes the bug (`shift_logits`, made and never
    read, in place of `logits`; the tensor before a `reshape` that made it unfit for its layer); its trial
    passes inside the framework's step, and the run ends in the fixed program's state."""
    case = needs(name)
    script = program(tmp_path, case, buggy=True)
    result, done = run(script, "--framework", name, DAIFU_MODE="automatic", DAIFU_APPROVE="auto")
    assert result is not None, done.stderr[-4000:]
    assert result == fixed_run(name, tmp_path_factory)
    recorded = [entry for entry in repairs(script) if entry.get("decision")]
    assert [(entry["decision"], entry["decided_by"]) for entry in recorded] == [("Surgery", "automatic")]


SKIPPED = {
    "hf": ("F.cross_entropy(shift_logits.reshape(-1, VOCAB)",
           "F.cross_entropy((shift_logits if self.state.global_step != 1 else logits).reshape(-1, VOCAB)"),
    "lightning": ("logits = self.net(x)", "logits = self.net(x if batch_idx != 2 else x[:, :4])"),
}
SKIP_POLICY = '''
import daifu as _daifu

_daifu.set_policy(lambda crash: _daifu.SkipIteration())

'''


@pytest.mark.parametrize("name", sorted(SKIPPED))
def test_a_skipped_step_passes_over_its_batch_in_the_framework(name: str, tmp_path: Path,
                                                               tmp_path_factory: pytest.TempPathFactory) -> None:
    """`SkipIteration` in a step: the framework passes over the batch and goes on, its counters
    consistent. The Trainer's step 2 (two micro-batches) learns nothing and logs a loss of 0; Lightning
    runs no backward for batch 2, and its optimizer step finds no gradient: six steps, six batches,
    five losses."""
    case = needs(name)
    script = program(tmp_path, case)
    fixed, crashing = SKIPPED[name]
    main = 'if __name__ == "__main__":'
    script.write_text(script.read_text().replace(fixed, crashing).replace(main, SKIP_POLICY + main))
    result, done = run(script, "--framework", name)
    assert result is not None, done.stderr[-3000:]
    reference = fixed_run(name, tmp_path_factory)
    decisions = [entry["decision"] for entry in repairs(script) if entry.get("decision")]
    if name == "hf":
        assert decisions == ["SkipIteration", "SkipIteration"]  # both micro-batches of step 2
        assert result["global_step"] == result["callback_steps"] == 4
        assert result["losses"][0] == reference["losses"][0] and result["losses"][1] == 0.0
        assert result["scheduler"] == reference["scheduler"]
    else:
        assert decisions == ["SkipIteration"]
        assert result["global_step"] == result["callback_batches"] == 6
        assert result["losses"][:2] == reference["losses"][:2] and len(result["losses"]) == 5
        assert result["scheduler"] == reference["scheduler"]


SPOILS_NEXT = {
    "hf": ("F.cross_entropy(shift_logits.reshape(-1, VOCAB)",
           "F.cross_entropy((shift_logits if self.state.global_step != 1 else logits).reshape(-1, VOCAB)",
           '(1.0 if self.state.global_step <= 1 else float("nan")) * F.cross_entropy(shift_logits.reshape(-1, VOCAB)'),
    "lightning": ("logits = self.net(x)", "logits = self.net(x if batch_idx != 2 else x[:, :4])",
                  'logits = self.net(x) * (1.0 if batch_idx <= 2 else float("nan"))'),
}
TRY_POLICY = '''
import json as _json
import daifu as _daifu


def _fix(crash):
    """Try a surgery that mends the crashed step and spoils the next ones; note its verdict; apply the fix."""
    verdict = crash.trial(_daifu.Surgery(crash.source.replace({crashing!r}, {spoiling!r})))
    with open("verdict.json", "w") as out:
        _json.dump({{"passed": verdict.passed, "text": verdict.describe(), "seen": len(verdict.iterations)}}, out)
    return _daifu.Surgery(crash.source.replace({crashing!r}, {fixed!r}))


_daifu.set_policy(_fix)

'''


@pytest.mark.parametrize("name", sorted(SPOILS_NEXT))
def test_a_trial_in_a_step_follows_the_frameworks_next_steps(name: str, tmp_path: Path,
                                                             tmp_path_factory: pytest.TempPathFactory) -> None:
    """A surgery that mends the crashed step but makes every later step's loss NaN: its trial follows
    the framework's next calls of the step (the horizon), sees the NaN and refuses it; the crashed step
    alone would have passed. The live run, repaired by the fix, ends as the fixed program's."""
    case = needs(name)
    script = program(tmp_path, case)
    fixed, crashing, spoiling = SPOILS_NEXT[name]
    main = 'if __name__ == "__main__":'
    policy = TRY_POLICY.format(crashing=crashing, spoiling=spoiling, fixed=fixed)
    script.write_text(script.read_text().replace(fixed, crashing).replace(main, policy + main))
    result, done = run(script, "--framework", name, DAIFU_TRIALS="fork")
    assert result is not None, done.stderr[-3000:]
    assert result == fixed_run(name, tmp_path_factory)
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    assert not verdict["passed"], verdict["text"]
    assert "past the crash" in verdict["text"] and "nan" in verdict["text"], verdict["text"]
    assert verdict["seen"] >= 2, verdict["text"]
