"""How much of what the rules engine and people propose on real crashes the allowlist admits unattended.

For every DLFailureBenchmark case, the buggy program runs (in its own process) with a policy that, at
each crash, builds the crash report, asks the in-process rules engine for its suggestions, checks each
with `daifu.allowlist` in the crash's live context, checks the case's recorded human repair the same
way, then applies that human repair so the run reaches its next crash. Every suggestion the rules
engine makes should be admitted; the human repairs show what a person writes that the allowlist
leaves to a person.

    python benchmarks/allowlist_corpus.py                  # all cases, results to stdout
    python benchmarks/allowlist_corpus.py --case api01 --json out.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def check_case(case_id: str, workdir: Path) -> list[dict[str, Any]]:
    """Run one case's buggy program; every suggestion and human repair met, with the allowlist's verdict."""
    import re
    import warnings

    import torch
    from loguru import logger

    import daifu
    from daifu.decide.allowlist import check_suggestion, context_for
    from daifu.decide.candidates import candidates
    from daifu.decide.verify import Verification
    from daifu.report.build import build_report
    from DLFailureBenchmark import cases, runner
    from repairbot.protocol import Suggestion
    from repairbot.rules import analyse

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    logger.remove()
    case = cases.select([case_id])[0]
    human = runner.policy_from(case)
    found: list[dict[str, Any]] = []

    def policy(crash: daifu.Crash) -> daifu.Decision:
        context = context_for(crash)
        _, suggestions = analyse(build_report(crash))
        for candidate in candidates(Verification(crash, daifu.settings()), suggestions):
            code = candidate.decision.source if isinstance(candidate.decision, daifu.Surgery) else None
            verdict = check_suggestion(candidate.suggestion, context, code)
            found.append(_row(case_id, "rules", candidate.kind, candidate.code, verdict.reasons, candidate.usable))
        decision = human(crash)
        kind = {daifu.Surgery: "surgery", daifu.Action: "action"}.get(type(decision))
        if kind is not None:
            code = getattr(decision, "source", None) or getattr(decision, "code", "")
            verdict = check_suggestion(Suggestion(kind=kind, code=code, explanation="", confidence=1), context)
            found.append(_row(case_id, "human", kind, code, verdict.reasons, True))
        return decision

    daifu.configure(mode="automatic", approve="never", workspace=workdir / "daifu_workspace")
    daifu.set_policy(policy)
    module = runner.load_program(case.program("buggy"), "dlfb_" + re.sub(r"\W", "_", case.id))
    try:
        module.main(workdir, 0)
    except Exception:  # noqa: S110 - a case whose repair does not hold still gave its suggestions
        pass
    return found


def _row(case: str, source: str, kind: str, code: str, reasons: tuple[str, ...], valid: bool) -> dict[str, Any]:
    return {
        "case": case,
        "by": source,
        "kind": kind,
        "valid": valid,
        "admitted": not reasons,
        "reasons": list(reasons),
        "code": code,
    }


def summary(rows: list[dict[str, Any]]) -> str:
    lines = []
    for by in ("rules", "human"):
        mine = [r for r in rows if r["by"] == by]
        coded = [r for r in mine if r["kind"] in ("surgery", "action", "patch_function")]
        admitted = [r for r in coded if r["admitted"]]
        lines.append(
            f"{by}: {len(admitted)}/{len(coded)} code suggestions admitted unattended "
            f"({len(mine) - len(coded)} retry/skip, always admitted)"
        )
        for row in coded:
            if not row["admitted"]:
                lines.append(f"  refused {row['case']} {row['kind']}: {'; '.join(row['reasons'])}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", default=[], help="a case id or prefix (default: all)")
    parser.add_argument("--json", type=Path, help="write every row here")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # run one case in this process, rows to stdout
    options = parser.parse_args()
    if options.one:
        with tempfile.TemporaryDirectory() as folder:
            print(json.dumps(check_case(options.one, Path(folder))))
        return 0
    from DLFailureBenchmark import cases

    rows: list[dict[str, Any]] = []
    for case in cases.select(options.case or None):
        done = subprocess.run(
            [sys.executable, __file__, "--one", case.id], capture_output=True, text=True, cwd=ROOT, timeout=900
        )
        if done.returncode != 0:
            print(f"{case.id}: the run failed:\n{done.stderr[-2000:]}", file=sys.stderr)
            continue
        rows += json.loads(done.stdout.strip().splitlines()[-1])
        print(
            f"{case.id}: {sum(r['admitted'] for r in rows if r['case'] == case.id)}"
            f"/{sum(r['case'] == case.id for r in rows)} admitted",
            file=sys.stderr,
        )
    if options.json:
        options.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    print(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
