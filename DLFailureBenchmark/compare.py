"""Two runs of the benchmark, case by case: the outcome of the automatic run and the repairs it applied.

`python -m DLFailureBenchmark.compare WORKDIR_A WORKDIR_B` reads two `--workdir` folders (finished or
still running: a case is compared once both have its fixed and automatic results) and prints one line
per case, `same` where the outcome and the repairs applied (decision, line and a digest of its code)
agree, then the count of each. Made to set a run with `DAIFU_TRIALS=inprocess` beside one with fork
trials (issue 31), it compares any two runs.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from DLFailureBenchmark import cases, harness


def automatic(work: Path, case: cases.Case) -> tuple[str, tuple[str, ...]] | None:
    """The case's outcome in `work` and the repairs its automatic run applied (`Decision@line#digest`, or
    `unrepaired:Type@line`); `None` until both its fixed and automatic runs have ended."""
    folder = work / case.id
    auto, fixed = folder / "automatic" / "result.json", folder / "fixed" / "result.json"
    if not auto.exists() or not fixed.exists():
        return None
    reference = json.loads(fixed.read_text())
    outcome = harness.outcome(case, reference.get("metrics") if reference.get("finished") else None,
                              json.loads(auto.read_text()))
    record = folder / "automatic" / "daifu_workspace" / "repairs.jsonl"
    applied = []
    for line in record.read_text().splitlines() if record.exists() else ():
        entry = json.loads(line)
        if entry.get("decision"):
            digest = hashlib.sha1(str(entry.get("code") or "").encode()).hexdigest()[:6]
            applied.append(f"{entry['decision']}@{entry.get('line')}#{digest}")
        elif entry.get("exception_type"):
            applied.append(f"unrepaired:{entry['exception_type']}@{entry.get('line')}")
    return outcome, tuple(applied)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m DLFailureBenchmark.compare WORKDIR_A WORKDIR_B", file=sys.stderr)
        return 2
    first, second = Path(argv[0]), Path(argv[1])
    counts = {"same": 0, "same outcome": 0, "different": 0}
    for case in cases.all_cases():
        a, b = automatic(first, case), automatic(second, case)
        if a is None or b is None:
            continue
        verdict = "same" if a == b else "same outcome" if a[0] == b[0] else "different"
        counts[verdict] += 1
        print(f"{case.id:42} {verdict:12} {a[0]:9} {','.join(a[1]):40} {b[0]:9} {','.join(b[1])}")
    print(", ".join(f"{name}: {count}" for name, count in counts.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
