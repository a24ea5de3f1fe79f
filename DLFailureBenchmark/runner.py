"""One run of one case's program, in its own process: `python -m DLFailureBenchmark.runner ...`.

The harness starts one process per run so that DaiFu's mode, its records and any patched PyTorch
call never leak from one run into the next. The mode comes from the environment (`DAIFU_MODE`,
`DAIFU_WORKSPACE`, `DAIFU_RECORD`, `DAIFU_APPROVE`, `DAIFU_REPAIRBOT_URL`); the result, a JSON
object, goes to `--out`.

    --resume CKPT --until N     the checkpoint-retry baseline: rebuild, load CKPT, train up to step N
    --overhead PAIRS            fault-free overhead: the program loaded twice in this process, plain
                                and vaccinated, timed in interleaved pairs after one warm-up each
    --policy                    answer crashes with the case's `repairs` (to record repairs.jsonl)

A program keeps its step count in a local named `step` and its checkpoint in `last.pt`, unless it
says otherwise: a program of the realistic set names its own, as a real script does, and declares
them in module constants `STEP_NAME` (`iteration`, `episode`) and `CHECKPOINT_NAME` (`ckpt.pt`).
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import os
import re
import sys
import textwrap
import time
import traceback
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from DLFailureBenchmark import cases
from DLFailureBenchmark.checkpoint import LAST


def load_program(path: Path, name: str) -> ModuleType:
    """Import the program at `path` as module `name`; `@daifu.transform` applies the mode in effect now."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def crash_step(error: BaseException, program: Path, name: str = "step") -> int | None:
    """The step counter `name` of the deepest frame of the program when it crashed: its progress at the crash."""
    step = None
    tb = error.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if Path(frame.f_code.co_filename).resolve() == program and isinstance(frame.f_locals.get(name), int):
            step = frame.f_locals[name]
        tb = tb.tb_next
    return step


def run_once(module: ModuleType, program: Path, workdir: Path, seed: int,
             resume: str | None, until: int | None) -> dict[str, Any]:
    from daifu.state import RUN

    workdir.mkdir(parents=True, exist_ok=True)
    before = RUN.recorded
    started = time.perf_counter()
    result: dict[str, Any] = {"finished": False, "metrics": None, "exception": None, "crash_step": None}
    try:
        kwargs = {"resume": resume, "until": until} if resume or until is not None else {}
        result["metrics"] = module.main(workdir, seed, **kwargs)
        result["finished"] = True
    except Exception as error:
        result["exception"] = {
            "type": type(error).__name__,
            "types": [c.__name__ for c in type(error).__mro__],
            "message": str(error)[:2000],
            "traceback": traceback.format_exc()[-4000:],
        }
        result["crash_step"] = crash_step(error, program, getattr(module, "STEP_NAME", "step"))
    result["elapsed_s"] = time.perf_counter() - started
    result["repairs"] = [dict(r) for r in RUN.repairs_since(before)]
    checkpoints = sorted(workdir.rglob(getattr(module, "CHECKPOINT_NAME", LAST)))
    result["checkpoint"] = str(checkpoints[0]) if checkpoints else None
    return result


def vaccinated_functions(module: ModuleType) -> list[str]:
    """The names of `module`'s functions that `@daifu.transform` vaccinated (`train`, or the program's own)."""
    return [name for name, value in vars(module).items() if callable(value) and hasattr(value, "__daifu__")]


def overhead(program: Path, workdir: Path, seed: int, pairs: int) -> dict[str, Any]:
    """Plain and vaccinated runs of the same program in one process, interleaved; the times of each."""
    os.environ["DAIFU_MODE"] = "off"
    plain = load_program(program, "dlfb_program_plain")
    os.environ["DAIFU_MODE"] = "interactive"  # fault-free: no crash, so no decision is ever asked for
    vaccinated = load_program(program, "dlfb_program_vaccinated")
    if not vaccinated_functions(vaccinated) or vaccinated_functions(plain):
        raise RuntimeError(f"{program}: its functions were not vaccinated in one copy and plain in the other")
    times: dict[str, list[float]] = {"plain": [], "vaccinated": []}
    for index in range(pairs + 1):
        order = [("plain", plain), ("vaccinated", vaccinated)]
        for name, module in order if index % 2 == 0 else order[::-1]:
            folder = workdir / f"{name}-{index}"
            folder.mkdir(parents=True)
            started = time.perf_counter()
            module.main(folder, seed)
            if index > 0:  # the first pair warms up both (lazy initialisation, caches)
                times[name].append(time.perf_counter() - started)
    ratios = [v / p for p, v in zip(times["plain"], times["vaccinated"])]
    return {"plain_s": times["plain"], "vaccinated_s": times["vaccinated"], "ratios": ratios}


def policy_from(case: cases.Case) -> Any:
    """A policy answering the case's crashes, in order, with the repairs its case file gives.

    A repair is `{"decision": name, ...}`: `Surgery` with `replace` (pairs of old and new text in
    the crashed function's source), `Action` with `code`, `Patch` with `function` (a qualified
    name in the program's module, e.g. a callee of the crashed statement) and `replace` (pairs in
    that function's source), `Plays` with `steps` (repairs of the other kinds), or `Retry`, `Skip`,
    `SkipIteration`.
    """
    import daifu

    answers = list(case.repairs)

    def replaced(source: str, pairs: list[list[str]], where: str) -> str:
        for old, new in pairs:
            if old not in source:
                raise ValueError(f"{case.id}: {old!r} is not in the source of {where}")
            source = source.replace(old, new, 1)
        return source

    def decision(spec: dict[str, Any], crash: daifu.Crash) -> Any:
        kind = spec["decision"]
        if kind == "Surgery":
            return daifu.Surgery(replaced(crash.source, spec["replace"], crash.function_name))
        if kind == "Action":
            return daifu.Action(spec["code"])
        if kind == "Patch":
            target: Any = crash.globals[spec["function"].split(".")[0]]
            for part in spec["function"].split(".")[1:]:
                target = getattr(target, part)
            source = textwrap.dedent(inspect.getsource(target))
            return daifu.Patch(f"{crash.globals['__name__']}:{spec['function']}",
                               replaced(source, spec["replace"], spec["function"]))
        if kind == "Plays":
            return daifu.Plays(tuple(decision(step, crash) for step in spec["steps"]))
        return {"Retry": daifu.Retry, "Skip": daifu.Skip, "SkipIteration": daifu.SkipIteration}[kind]()

    def policy(crash: daifu.Crash) -> Any:
        if not answers:
            return daifu.Raise()
        return decision(answers.pop(0), crash)

    return policy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", required=True, help="the case's folder")
    parser.add_argument("--variant", choices=("buggy", "fixed"), required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resume")
    parser.add_argument("--until", type=int)
    parser.add_argument("--overhead", type=int, default=0, metavar="PAIRS")
    parser.add_argument("--policy", action="store_true")
    options = parser.parse_args(argv)
    torch.set_num_threads(1)  # one core per run: steadier timings on a small machine
    warnings.simplefilter("ignore")
    case = cases.load(Path(options.case))
    program = case.program(options.variant)
    workdir = Path(options.workdir)
    if options.overhead:
        result = overhead(program, workdir, options.seed, options.overhead)
    else:
        from loguru import logger

        logger.remove()  # DaiFu's record goes to its file; this process's output stays short
        if options.policy:
            import daifu

            daifu.set_policy(policy_from(case))
        module = load_program(program, "dlfb_" + re.sub(r"\W", "_", case.id) + "_" + options.variant)
        result = run_once(module, program, workdir, options.seed, options.resume, options.until)
    Path(options.out).write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
