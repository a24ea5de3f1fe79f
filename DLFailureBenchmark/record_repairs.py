"""Record each case's in-situ repair: `python -m DLFailureBenchmark.record_repairs [ID ...]`.

Runs the buggy program vaccinated, with a policy giving the repairs its `case.json` lists (the
repair a person would make at the `(DaiFu)` console), checks that the run finished, and writes
the resulting record to the case's `repairs.jsonl`, which replay mode re-applies. File paths in
the record are made relative to the repository, so the record does not name this machine.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from DLFailureBenchmark import cases, harness


def record(case: cases.Case, runs: harness.Runs) -> str:
    """Record the case's repairs; a message that starts with "did not" when the run did not finish.

    When every repair of the case was applied but the run still did not finish, the record is
    written all the same: the human repair is right and DaiFu failed to carry it out (a finding
    the case's description notes), and its replay must show that failure until DaiFu is fixed.
    """
    result, _ = runs.run(case, "record", "buggy", "interactive", "--policy")
    applied = harness.applied_repairs(result)
    if not result.get("finished") and len(applied) < len(case.repairs):
        return f"did not finish: {result.get('error') or result.get('exception')}"
    lines = []
    for entry in applied:
        if entry.get("file"):
            entry["file"] = str(Path(entry["file"]).relative_to(harness.ROOT))
        lines.append(json.dumps(entry))
    case.record.write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = f"{len(lines)} repair(s): " + ", ".join(e["decision"] for e in applied)
    if not result.get("finished"):
        error = result.get("exception") or {}
        return f"did not finish after {done} (record kept): {error.get('type')}: {error.get('message')}"
    return done


def main(argv: list[str] | None = None) -> int:
    ids = list(argv if argv is not None else sys.argv[1:])
    selected = cases.select(ids or None)
    failed = 0
    import tempfile

    with tempfile.TemporaryDirectory(prefix="dlfb-record-") as folder:
        runs = harness.Runs(Path(folder), None, harness.Plan())
        for case in selected:
            outcome = record(case, runs)
            failed += outcome.startswith("did not")
            print(f"{case.id:<40} {outcome}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
