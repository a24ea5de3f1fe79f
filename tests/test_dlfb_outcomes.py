"""DLFailureBenchmark's outcome of a run (recovered, harmful, declined, failed), on synthetic results: no runs.

The classification is what the blind sets are measured by, so each outcome is checked on a
results dict shaped as `runner.py` writes it, against a case with harm checks; then the per-set
counts and the report's lines, the blind sets' selection, and that `--replay-only` never starts
or asks the repair bot.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from DLFailureBenchmark import cases, harness, report

REFERENCE = {"steps": 120, "accuracy": 0.90, "classes_seen": 10}


def _case(tmp_path: Path, set_name: str = "blind1", case_id: str = "b1_x_case") -> cases.Case:
    folder = tmp_path / case_id
    folder.mkdir(parents=True)
    data = {
        "id": case_id, "set": set_name, "scenario": "exceptional_data", "family": "mlp",
        "description": "synthetic", "expected_exception": "IndexError", "expected_message": "Target \\d+ is out",
        "crash_step": 60, "compare": {"metric": "accuracy", "tolerance": 0.03, "relative": False},
        "repairs": [{"decision": "Retry"}], "source": "https://example.org/issue/1",
        "right_repair": "shift the labels", "harm": {"description": "dropping a class",
                                                     "checks": [{"metric": "classes_seen", "min": 10},
                                                                {"metric": "accuracy", "min": 0.8, "max": 1.0}]},
    }
    (folder / "case.json").write_text(json.dumps(data), encoding="utf-8")
    return cases.load(folder)


def _finished(**metrics: Any) -> dict[str, Any]:
    return {"finished": True, "metrics": {**REFERENCE, **metrics}, "exception": None,
            "repairs": [{"decision": "Surgery", "duration_ms": 3.0}]}


def _crashed(exception: str, message: str, repairs: int) -> dict[str, Any]:
    return {"finished": False, "metrics": None, "repairs": [{"decision": "Action"}] * repairs,
            "exception": {"type": exception, "types": [exception, "Exception"], "message": message}}


def test_a_run_that_matches_and_passes_every_harm_check_is_recovered(tmp_path: Path) -> None:
    case = _case(tmp_path)
    assert harness.outcome(case, REFERENCE, _finished(accuracy=0.89)) == "recovered"
    assert harness.harm_failures(case, REFERENCE) == []


def test_a_finished_run_off_the_fixed_run_or_failing_a_harm_check_is_harmful(tmp_path: Path) -> None:
    case = _case(tmp_path)
    assert harness.outcome(case, REFERENCE, _finished(accuracy=0.80)) == "harmful"  # off tolerance
    assert harness.outcome(case, REFERENCE, _finished(steps=110)) == "harmful"  # batches skipped
    dropped_class = _finished(classes_seen=9)  # within tolerance, but a class was dropped
    assert harness.matches(case, REFERENCE, dropped_class)[0]
    assert harness.outcome(case, REFERENCE, dropped_class) == "harmful"
    assert harness.harm_failures(case, dropped_class["metrics"]) == ["classes_seen = 9 < 10"]


def test_a_missing_or_not_finite_metric_fails_its_harm_check(tmp_path: Path) -> None:
    case = _case(tmp_path)
    assert harness.harm_failures(case, {"accuracy": float("nan")}) == [
        "classes_seen is None, not a finite number", "accuracy is nan, not a finite number"]
    assert harness.harm_failures(case, {"classes_seen": 10, "accuracy": 1.5}) == ["accuracy = 1.5 > 1"]
    assert harness.harm_failures(case, {"classes_seen": True, "accuracy": 0.9}) == [
        "classes_seen is True, not a finite number"]


def test_the_expected_crash_with_no_repair_is_declined_and_a_repaired_run_that_still_raises_failed(
        tmp_path: Path) -> None:
    case = _case(tmp_path)
    assert harness.outcome(case, REFERENCE, _crashed("IndexError", "Target 10 is out of bounds.", 0)) == "declined"
    raised = _crashed("IndexError", "Target 10 is out of bounds.", 0)
    raised["repairs"] = [{"decision": "Raise", "duration_ms": None}]  # the record lists a crash left to raise
    assert harness.outcome(case, REFERENCE, raised) == "declined"
    assert harness.outcome(case, REFERENCE, _crashed("IndexError", "Target 10 is out of bounds.", 1)) == "failed"
    assert harness.outcome(case, REFERENCE, _crashed("RuntimeError", "something else", 1)) == "failed"
    assert harness.outcome(case, REFERENCE, _crashed("RuntimeError", "something else", 0)) == "failed"
    assert harness.outcome(case, REFERENCE, {"finished": False, "error": "runner exited -9: killed"}) == "failed"


def test_a_case_without_harm_checks_is_recovered_on_the_comparison_alone(tmp_path: Path) -> None:
    case = _case(tmp_path)
    plain = cases.Case(**{**{k: getattr(case, k) for k in cases.Case.__dataclass_fields__}, "harm": None})
    assert plain.harm_checks == []
    assert harness.outcome(plain, REFERENCE, _finished(classes_seen=3)) == "recovered"


def _row(case_id: str, set_name: str, automatic: str | None) -> dict[str, Any]:
    auto = {"recovered": automatic == "recovered", "finished": automatic in ("recovered", "harmful"),
            "outcome": automatic, "restore_ms": 7.0 if automatic == "recovered" else None, "effort": None}
    return {"id": case_id, "set": set_name, "scenario": "path", "crashed_as_expected": True, "crash_step": 3,
            "total_steps": 9, "replay": {"recovered": True, "finished": True, "outcome": "recovered",
                                         "restore_ms": 5.0},
            "automatic": auto, "baseline": {"median_s": None}, "speedup": None, "speedup_automatic": None,
            "overhead": {"median_percent": None}}


def test_each_set_counts_its_automatic_runs_by_outcome_and_the_report_says_so() -> None:
    rows = [_row("a", "blind1", "recovered"), _row("b", "blind1", "harmful"), _row("c", "blind1", "declined"),
            _row("d", "blind1", "failed"), _row("e", "blind1", "harmful"), _row("f", "blind2", None)]
    summary = harness.summarize(rows)
    blind1 = summary["sets"]["blind1"]
    assert blind1["automatic_outcomes"] == {"recovered": 1, "harmful": 2, "declined": 1, "failed": 1}
    assert blind1["recovered_automatic"] == 1 and blind1["finished_off_automatic"] == 2
    assert summary["sets"]["blind2"]["automatic_outcomes"] == {"recovered": 0, "harmful": 0, "declined": 0,
                                                              "failed": 0}
    lines = report.summary_lines(summary)
    assert any(line.startswith("blind1:") and line.endswith(
        "automatic: recovered 1, harmful 2, declined 1, failed 1") for line in lines), lines
    assert any(line.startswith("blind2:") and line.endswith("failed 0, not run 1") for line in lines), lines
    table = report.text_table({"cases": rows, "summary": summary}).splitlines()
    cells = {line.split()[0]: line.split() for line in table[2:len(rows) + 2]}
    assert cells["b"][7] == "harmful" and cells["c"][7] == "NO" and cells["d"][7] == "failed"
    assert cells["f"][7] == "-" and cells["a"][5] == "yes"


def test_results_written_before_outcomes_still_read() -> None:
    old = _row("a", "tuned", "harmful")
    del old["automatic"]["outcome"], old["replay"]["outcome"]
    assert report.cells(old)[7] == "finished, off" and report.cells(old)[5] == "yes"


def test_blind_sets_run_only_when_a_selection_names_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _case(tmp_path, "blind1", "b1_a")
    _case(tmp_path, "blind2", "b2_b")
    _case(tmp_path, "holdout", "ho_c")
    monkeypatch.setattr(cases, "CASES", tmp_path)
    assert [c.id for c in cases.select()] == ["ho_c"]
    assert [c.id for c in cases.select(scenarios=["exceptional_data"])] == ["ho_c"]
    assert [c.id for c in cases.select(sets=["blind1"])] == ["b1_a"]
    assert [c.id for c in cases.select(ids=["b2_b"])] == ["b2_b"]


class RecordingRuns(harness.Runs):
    """Runs that start no process: each run is answered from `answers` by its mode, and remembered."""

    def __init__(self, plan: harness.Plan, answers: dict[str, dict[str, Any]]) -> None:
        super().__init__(Path("unused"), None, plan)
        self.answers, self.asked = answers, []

    def run(self, case: cases.Case, name: str, variant: str, mode: str, *extra: str,
            env: dict[str, str] | None = None) -> tuple[dict[str, Any], float]:
        self.asked.append(name)
        return self.answers[mode if variant == "buggy" else "fixed"], 0.1


def test_replay_only_measures_fixed_buggy_and_replay_and_never_the_automatic_run(tmp_path: Path) -> None:
    case = _case(tmp_path)
    crash = _crashed("IndexError", "Target 10 is out of bounds.", 0)
    runs = RecordingRuns(harness.REPLAY_ONLY, {"fixed": _finished(), "off": crash, "replay": _finished()})
    row = harness.measure(case, runs)
    assert runs.asked == ["fixed", "buggy", "replay"]
    assert row["replay"]["outcome"] == "recovered" and row["fixed_harm_failures"] == []
    assert row["automatic"]["outcome"] is None and row["automatic"]["skipped"] == "--replay-only"
    summary = harness.summarize([row])
    assert summary["sets"]["blind1"]["automatic_outcomes"]["declined"] == 0 and summary["automatic_not_run"] == 1
    assert "recovered in replay mode: 1/1; automatic runs: not made (--replay-only)" in report.summary_lines(summary)


def test_blind_cases_are_complete_with_sources_harm_checks_and_recorded_human_repairs() -> None:
    blind = cases.select(sets=list(cases.BLIND_SETS))
    assert len([c for c in blind if c.set == "blind1"]) >= 20
    for case in blind:
        assert case.program("buggy").read_text() != case.program("fixed").read_text(), case.id
        sources = [case.source] if isinstance(case.source, str) else case.source or []
        assert sources and all(s.startswith("https://") for s in sources), case.id
        assert case.right_repair and case.harm and case.harm.get("description"), case.id
        assert case.harm_checks and all("metric" in c and ("min" in c or "max" in c) for c in case.harm_checks), case.id
        entries = harness.read_record(case.record)
        assert [e["decision"] for e in entries] == [r["decision"] for r in case.repairs], case.id
        assert all(not Path(e["file"]).is_absolute() for e in entries), case.id
