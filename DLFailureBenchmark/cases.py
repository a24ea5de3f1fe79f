"""The benchmark's cases: one folder each under `cases/`, with `case.json`, `buggy/`, `fixed/` and `repairs.jsonl`.

`case.json` says what the case is and how its result is judged:

    id, scenario, family, description        what the program is and what goes wrong
    expected_exception                         the exception's class name (or a base class's)
    expected_message                           a regular expression its message matches
    crash_step                                 the training step the buggy run crashes in
    compare: {metric, tolerance, relative}     the metric of `main()`'s result compared with the
                                               fixed run's; `relative`: tolerance times |fixed|;
                                               the number of steps must be the same as well
    repairs: [...]                             the in-situ repair a person would make, one per crash,
                                               which `record_repairs.py` records into repairs.jsonl
    quick                                      part of the `--quick` subset
    set                                        which measure the case belongs to (default "tuned"):
                                               "tuned"    the 36 cases the repair rules were written
                                                          alongside;
                                               "holdout"  cases written afterwards without looking at
                                                          the rules (README: "The three sets");
                                               "realistic" full-sized training programs written for
                                                          the benchmark in the shape of common
                                                          model families (argparse options, model
                                                          classes, epochs, evaluation, checkpoints),
                                                          one bug each;
                                               "blind1" to "blind4" crashes real users reported,
                                                          written blind to the bot, their right
                                                          repair and harm checks fixed before any
                                                          automatic run (README: "The blind sets")
    source                                     the address(es) of the real report(s) (blind sets)
    right_repair                               what the right repair is and why (blind sets)
    harm: {description, checks}                what a harmful "repair" would do, and checks on
                                               `main()`'s result that every recovered run must
                                               pass: [{metric, min} or {metric, max}, ...]
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CASES = HERE / "cases"
SCENARIOS = {
    "api_misuse": "API misuse",
    "tensor_mismatch": "tensor mismatch",
    "out_of_memory": "out-of-memory bug",
    "gpu_contention": "GPU contention",
    "path": "path problem",
    "exceptional_data": "exceptional data",
    "nondeterministic": "non-deterministic runtime error",
    "large_model": "larger model, fault mid-training",
}
SETS = ("tuned", "holdout", "realistic", "blind1", "blind2", "blind3", "blind4")
BLIND_SETS = ("blind1", "blind2", "blind3", "blind4")
"""Sets whose first automatic run is their figure: only a selection that names them (`--set`, `--case`) runs them."""


@dataclass(frozen=True)
class Case:
    id: str
    scenario: str
    family: str
    description: str
    expected_exception: str
    expected_message: str
    crash_step: int
    compare: dict[str, Any]
    repairs: list[dict[str, Any]]
    quick: bool = False
    set: str = "tuned"
    source: str | list[str] | None = None
    right_repair: str | None = None
    harm: dict[str, Any] | None = None
    folder: Path = field(default=CASES, compare=False)

    def program(self, variant: str) -> Path:
        """The training program of `variant` ("buggy" or "fixed")."""
        return self.folder / variant / "train.py"

    @property
    def record(self) -> Path:
        return self.folder / "repairs.jsonl"

    @property
    def harm_checks(self) -> list[dict[str, Any]]:
        """The checks a finished run's metrics must pass to count as recovered (none for most sets)."""
        return list((self.harm or {}).get("checks", []))


def load(folder: Path) -> Case:
    data = json.loads((folder / "case.json").read_text(encoding="utf-8"))
    known = set(Case.__dataclass_fields__) - {"folder"}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"{folder / 'case.json'} has unknown keys: {', '.join(sorted(unknown))}")
    if data.get("set", "tuned") not in SETS:
        raise ValueError(f"{folder / 'case.json'}: set {data['set']!r} is not one of {', '.join(SETS)}")
    return Case(folder=folder.resolve(), **data)


def all_cases() -> list[Case]:
    return [load(path.parent) for path in sorted(CASES.glob("*/case.json"))]


def select(ids: list[str] | None = None, scenarios: list[str] | None = None, quick: bool = False,
           sets: list[str] | None = None) -> list[Case]:
    """The cases asked for, in folder order; a name that matches nothing is an error.

    The blind sets are left out unless `ids` or `sets` name cases: a full run must not spend their
    first automatic run by accident (README: "The blind sets").
    """
    cases = all_cases()
    if not ids and not sets:
        cases = [c for c in cases if c.set not in BLIND_SETS]
    if ids:
        missing = [i for i in ids if not any(c.id == i or c.id.startswith(i) for c in cases)]
        if missing:
            raise SystemExit(f"no case named {', '.join(missing)}; see DLFailureBenchmark/cases/")
        cases = [c for c in cases if any(c.id == i or c.id.startswith(i) for i in ids)]
    if scenarios:
        unknown = [s for s in scenarios if s not in SCENARIOS]
        if unknown:
            raise SystemExit(f"no scenario {', '.join(unknown)}; scenarios: {', '.join(SCENARIOS)}")
        cases = [c for c in cases if c.scenario in scenarios]
    if sets:
        unknown = [s for s in sets if s not in SETS]
        if unknown:
            raise SystemExit(f"no set {', '.join(unknown)}; sets: {', '.join(SETS)}")
        cases = [c for c in cases if c.set in sets]
    if quick:
        cases = [c for c in cases if c.quick]
    return cases
