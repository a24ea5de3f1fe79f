"""Generated functions, run plain and vaccinated, with and without an injected fault.

- no fault: vaccinated ≡ plain (result and trace);
- a fault raised once at a random trace statement, answered by `Retry` ≡ plain;
- the same fault answered by `Skip` ≡ plain without that statement for that one execution.
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path
from typing import Any

import pytest

import daifu
from tests.programgen import Injector, InjectedFault, ProgramGenerator

SEEDS = range(120)
ARGUMENTS = [(0, 0), (3, 5), (7, 2), (11, 12)]


def load(source: str, folder: Path, name: str) -> Any:
    path = folder / f"{name}.py"
    path.write_text("from tests.programgen import tracked\n\n" + source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.generated


def run(fn: Any, a: int, b: int, injector: Injector) -> Any:
    try:
        return fn(a, b, injector)
    except InjectedFault as fault:
        return ("escaped", fault.args)


@pytest.mark.parametrize("seed", SEEDS)
def test_vaccinated_matches_plain(seed: int, tmp_path: Path, decide) -> None:
    generator = ProgramGenerator(seed)
    plain = load(generator.source(), tmp_path, f"plain_{seed}")
    vaccinated = daifu.transform(load(generator.source(), tmp_path, f"vacc_{seed}"))
    for a, b in ARGUMENTS:
        assert run(vaccinated, a, b, Injector(None)) == run(plain, a, b, Injector(None))

    target = random.Random(seed).choice(generator.appends)
    faulty = daifu.transform(load(generator.source("fault", target), tmp_path, f"fault_{seed}"))
    skipping = load(generator.source("skip", target), tmp_path, f"skip_{seed}")
    for a, b in ARGUMENTS:
        crashes = decide(daifu.Retry())
        assert run(faulty, a, b, Injector(target)) == run(plain, a, b, Injector(None))
        assert len(crashes) <= 1
        decide(daifu.Skip())
        assert run(faulty, a, b, Injector(target)) == run(skipping, a, b, Injector(target))
