"""DLFailureBenchmark's three sets: selection, per-set summary, and the repair-effort column (fast, no runs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from DLFailureBenchmark import cases, harness, report


def test_every_case_names_a_known_set_and_the_sets_are_apart() -> None:
    everything = cases.all_cases()
    by_set = {name: [c.id for c in cases.select(sets=[name])] for name in cases.SETS}
    assert len(by_set["tuned"]) == 36
    assert len(by_set["holdout"]) >= 10
    assert len(by_set["realistic"]) == 8
    assert sum(len(ids) for ids in by_set.values()) == len(everything)
    assert {c.set for c in everything} <= set(cases.SETS)  # a blind set may still be being written


def test_quick_membership_is_the_tuned_ci_subset() -> None:
    quick = cases.select(quick=True)
    assert [c.id for c in quick] == ["api01_cnn_eval_slice_float", "nd01_cnn_flaky_checkpoint_write",
                                     "oom01_cnn_batch_ramp", "path02_lm_validation_file_typo",
                                     "tm05_rl_float64_observations"]


def test_new_cases_are_complete_and_their_records_match_their_repairs() -> None:
    for case in cases.select(sets=["holdout", "realistic"]):
        assert case.program("buggy").exists() and case.program("fixed").exists(), case.id
        assert case.program("buggy").read_text() != case.program("fixed").read_text(), case.id
        entries = harness.read_record(case.record)
        assert [e["decision"] for e in entries] == [r["decision"] for r in case.repairs], case.id
        assert all(not Path(e["file"]).is_absolute() for e in entries), case.id


def test_unknown_set_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "x"
    shutil.copytree(cases.CASES / "api01_cnn_eval_slice_float", folder)
    data = json.loads((folder / "case.json").read_text())
    data["set"] = "holdouts"
    (folder / "case.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="holdouts"):
        cases.load(folder)
    with pytest.raises(SystemExit, match="no set"):
        cases.select(sets=["holdouts"])


def _row(case_id: str, set_name: str, auto: bool, finished: bool = True) -> dict[str, Any]:
    return {"id": case_id, "set": set_name, "scenario": "path", "crashed_as_expected": True, "crash_step": 3,
            "total_steps": 9, "replay": {"recovered": True, "finished": True, "restore_ms": 5.0},
            "automatic": {"recovered": auto, "finished": finished, "restore_ms": 7.0 if auto else None,
                          "effort": None},
            "baseline": {"median_s": 1.0, "redone_steps": 2}, "speedup": 200.0, "speedup_automatic": None,
            "overhead": {"median_percent": 0.1}}


def test_summary_gives_the_automatic_rate_of_each_set_apart() -> None:
    rows = [_row("a", "tuned", True), _row("b", "tuned", True), _row("c", "holdout", False, finished=False),
            _row("d", "holdout", True), _row("e", "realistic", False, finished=True), _row("f", "realistic", False,
                                                                                         finished=False)]
    summary = harness.summarize(rows)
    assert summary["recovered_automatic"] == 3
    assert summary["sets"]["tuned"]["recovered_automatic"] == 2
    assert summary["sets"]["holdout"] == {"cases": 2, "crashed_as_expected": 2, "recovered_replay": 2,
                                          "recovered_automatic": 1, "finished_off_automatic": 0,
                                          "automatic_outcomes": {"recovered": 0, "harmful": 0, "declined": 0,
                                                                 "failed": 0}}  # these rows predate outcomes
    assert summary["sets"]["realistic"]["recovered_automatic"] == 0
    assert summary["sets"]["realistic"]["finished_off_automatic"] == 1
    lines = report.summary_lines(summary)
    assert any(line.startswith("holdout:") and "recovered automatically 1/2 (50%)" in line for line in lines)
    assert any(line.startswith("realistic:") and "recovered automatically 0/2 (0%)" in line for line in lines)
    table = report.text_table({"cases": rows, "summary": summary})
    assert "candidates / trials / time to repair" in table


def test_effort_is_read_from_trials_in_the_workspace_record(tmp_path: Path) -> None:
    record = tmp_path / "repairs.jsonl"
    entries = [
        {"repair": 1, "decision": "Surgery", "duration_ms": 40.5,
         "trials": [{"decision": "Skip", "verdict": "raised", "ms": 12.0},
                    {"decision": "Surgery", "verdict": "completed", "ms": 20.0}]},
        {"repair": 2, "decision": "Retry", "duration_ms": 9.5,
         "trials": [{"decision": "Retry", "verdict": "raised", "ms": 3.0},
                    {"decision": "Retry", "verdict": "completed", "ms": 4.0}]},
        {"repair": 3, "decision": "Retry", "duration_ms": 100.0},
    ]
    record.write_text("\n".join(json.dumps(e) for e in entries) + "\nnot json\n")
    found = harness.effort(harness.read_record(record))
    assert found == {"candidates": 3, "trials": 4, "repair_ms": 50.0, "trial_ms": 39.0,
                     "verdicts": ["raised", "completed", "raised", "completed"]}
    assert report.effort_cell(found) == "3 / 4 / 50.0 ms"


def test_effort_is_unknown_without_trials(tmp_path: Path) -> None:
    assert harness.read_record(tmp_path / "missing.jsonl") == []
    assert harness.effort([{"repair": 1, "decision": "Retry", "duration_ms": 3.0}]) is None
    assert report.effort_cell(None) == "-"
