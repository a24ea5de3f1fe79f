"""Generated functions, run plain and vaccinated, with and without an injected fault.

For every generated program (`tests/programgen.py`), under both scope models (`@daifu.transform`,
ordinary locals; `daifu.transform(globals())`, the prototype's: the variables are module globals,
`daifu.core.seedscope`), and every argument pair (with an injected fault, under the prototype's
model, which compiles more per repair, half of them: two of the four pairs, alternating by seed):

- no fault: vaccinated ≡ plain (result, trace, closures' values, the decorators' calls; the
  vaccinated function is the one with a fault, whose injector has no target);
- a fault raised once at a random trace statement (inside a `finally` clause too), answered by
  `Retry` ≡ plain (resumed by the version's resume-anywhere continuation, or for odd seeds by one
  compiled for the site: a segment holding the rest of the iteration, or for every fourth seed one
  holding the whole rest of the call); by `Action` (rebinding `a` and `b` to themselves, through the
  cells the nested scopes share) ≡ plain; by a `Surgery` installing the function's own source again
  (its new version has no resume-anywhere code: a segment or a continuation for the site) ≡ plain;
  by `Skip` ≡ plain without that statement for that one execution;
- a fault whose cause is a statement a few lines up, at some level of the faulty statement's path
  within the interrupted iteration (`programgen.Above`), answered by a `Surgery` of that statement
  (for odd seeds with a change further down too, so that the new version is matched block by
  block instead of derived from the change) ≡ the plain program that jumps back to the changed
  statement, as the run must resume there; the calls after it ≡ the fixed program run plainly
  (under one scope model per program, alternating).

`DAIFU_DIFFERENTIAL_PROGRAMS` sets how many programs (50 by default: the README's test command stays short),
`DAIFU_DIFFERENTIAL_FIRST` the first seed: CI runs the 1,650 that follow on the main interpreter and gives
every Python it has its own seeds, so that each interpreter adds programs none of the others ran.
"""

from __future__ import annotations

import inspect
import linecache
import os
import random
from typing import Any
from collections.abc import Callable

import pytest

import daifu
from tests import programgen
from tests.programgen import HEADER, Above, ArmedInjector, Injector, InjectedFault, ProgramGenerator

PROGRAMS = int(os.environ.get("DAIFU_DIFFERENTIAL_PROGRAMS", "50"))
FIRST = int(os.environ.get("DAIFU_DIFFERENTIAL_FIRST", "0"))
CHUNK = 25
ARGUMENTS = [(0, 0), (3, 5), (7, 2), (11, 12)]
DECISIONS: dict[str, Callable[[], Any]] = {
    "retry": daifu.Retry,
    "action": lambda: daifu.Action("a, b = a, b"),
    "surgery": lambda: lambda crash: daifu.Surgery(crash.source),
}


def load(source: str, name: str) -> Any:
    """The `generated` function of `source`, compiled as a module whose text `linecache` knows."""
    filename = f"<generated {name}>"
    text = HEADER + source
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    namespace: dict[str, Any] = {"__name__": f"generated_{name}"}
    exec(compile(text, filename, "exec"), namespace)
    return namespace["generated"]


def run(fn: Any, a: int, b: int, injector: Injector) -> Any:
    """The function's outcome and the calls its decorators saw."""
    programgen.CALLS.clear()
    try:
        outcome = fn(a, b, injector)
    except InjectedFault as fault:
        outcome = ("escaped", fault.args)
    return outcome, list(programgen.CALLS)


def vaccinate(fn: Any, scope: str) -> Any:
    """`fn` vaccinated under the scope model `scope`: "local" or "module" (its module's globals)."""
    if scope == "local":
        return daifu.transform(fn)
    return daifu.transform(inspect.unwrap(fn).__globals__)(fn)


SCOPES = ("local", "module")


def check(seed: int, decide: Callable[..., list[daifu.Crash]], scope: str) -> None:
    generator = ProgramGenerator(seed)
    plain = load(generator.source(), f"plain_{seed}")
    target = random.Random(seed).choice(generator.appends)
    # With no target the injector never fires: the function with a fault runs as the plain one.
    faulty = vaccinate(load(generator.source("fault", target), f"fault_{scope}_{seed}"), scope)
    for a, b in ARGUMENTS:
        assert run(faulty, a, b, Injector(None)) == run(plain, a, b, Injector(None)), (seed, a, b, scope)

    vaccine = inspect.unwrap(faulty).__daifu__
    if seed % 2:  # resume through a continuation compiled for the site, as a surgery's new version does
        vaccine.current.anywhere = None
    vaccine.segmented = seed % 4 != 3
    skipping = load(generator.source("skip", target), f"skip_{seed}")
    for a, b in ARGUMENTS if scope == "local" else ARGUMENTS[seed % 2 :: 2]:  # the slower model: half the pairs
        expected = run(plain, a, b, Injector(None))
        for name, decision in DECISIONS.items():
            crashes = decide(decision())
            assert run(faulty, a, b, Injector(target)) == expected, (seed, a, b, name, scope)
            assert len(crashes) <= 1, (seed, a, b, name, scope)
        decide(daifu.Skip())
        assert run(faulty, a, b, Injector(target)) == run(skipping, a, b, Injector(target)), (seed, a, b, "skip", scope)


def check_above(seed: int, decide: Callable[..., list[daifu.Crash]], scope: str) -> None:
    generator = ProgramGenerator(seed)
    generator.source()
    target = random.Random(seed).choice(generator.appends)
    above = Above(generator.source("fault", target), target, random.Random(seed + 1))
    faulty = vaccinate(load(above.faulty, f"above_{scope}_{seed}"), scope)
    inspect.unwrap(faulty).__daifu__.segmented = seed % 4 != 3
    jumping_back, fixed = load(above.expected, f"back_{seed}"), load(above.fixed, f"fixed_{seed}")
    last = "    return trace, a, b, [f() for f in kept]"

    def surgery(crash: daifu.Crash) -> daifu.Surgery:
        source = crash.source.replace(above.cause, above.fix)
        return daifu.Surgery(source.replace(last, f"    return ({last.strip()[7:]})") if seed % 2 else source)

    crashes = decide(surgery)
    for a, b in ARGUMENTS:
        expected = run(fixed if crashes else jumping_back, a, b, ArmedInjector(target))
        assert run(faulty, a, b, ArmedInjector(target)) == expected, (seed, a, b, "above", above.level, scope)
    assert len(crashes) <= 1, (seed, "above", scope)


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("first", range(FIRST, FIRST + PROGRAMS, CHUNK))
def test_vaccinated_matches_plain(first: int, scope: str, decide: Callable[..., list[daifu.Crash]]) -> None:
    for seed in range(first, min(first + CHUNK, FIRST + PROGRAMS)):
        check(seed, decide, scope)
        if scope == SCOPES[seed % 2]:
            check_above(seed, decide, scope)
