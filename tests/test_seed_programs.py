"""Programs written for the prototype run unchanged on DaiFu (issue 11).

Each folder of `tests/seed_programs/` is a small program in the prototype's style — its switches,
`@daifu.transform(globals())`, recorded repairs in `daifu_workspace/`, `log_program_end` — and
`PROGRAMS` below says what the prototype does with it. Every expectation was taken from running
the program on the prototype itself (`QAZASDEDC/DaiFu`, commit 0a3663ec, Python 3.11): set
`DAIFU_SEED_PROTOTYPE` to the folders to put on `PYTHONPATH` for it (a checkout of that
repository, and `bidict`) to check them again; the DaiFu-only flows are then not run.

Each program is run in three flows, each in a fresh copy of its folder, with no terminal:
- plain Python (`DAIFU_MODE=off`): it crashes where it is designed to (the two scope programs
  where plain Python's scopes differ from the prototype's), or runs (`fixed_run`);
- the prototype's repeated experiment (its `repeat_experiments.py`): `python main.py` twice in one
  folder. The first run is the program run as a user runs it, with its recorded repairs
  replayed from `REPEAT_ACTIONS`; after the second, the records are read as `tests/seed_record.py`
  reads them;
- `daifu replay main.py`: the same program through DaiFu's command.

Every run is a process of its own. By default they are forked from one process that has imported
torch (`tests/seed_runner.py`), two at a time, all before the first test asks for them, which
keeps the whole file within seconds; `DAIFU_SEED_TESTS=1` (and `DAIFU_SEED_PROTOTYPE`) starts
each run as a new `python` instead, as a person's shell would. The README's test command checks four
of the programs (`SAMPLE`), `-m e2e` the other six; only the flows of the programs selected are run.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

import pytest

from tests.seed_record import parse, prototype_view, restore_seconds

pytestmark = [pytest.mark.torch, pytest.mark.slow]  # the flows, run once for the file, take seconds

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS_DIR = Path(__file__).parent / "seed_programs"
PROTOTYPE = os.environ.get("DAIFU_SEED_PROTOTYPE")
FORKED = not PROTOTYPE and os.environ.get("DAIFU_SEED_TESTS") != "1"
TIMEOUT = 180
PARALLEL = max(2, min(4, os.cpu_count() or 2))

Key = tuple[str, str | None]


def begin() -> list[Key]:
    return [("begin", None)]


def repair(number: int, *plays: str) -> list[Key]:
    """`Repair N Begin`, a `Repairing... <Play>` line per play, `Repair N End`."""
    return [("repair_begin", str(number)), *[("play", play) for play in plays], ("repair_end", str(number))]


def end(value: str) -> list[Key]:
    return [("end", value)]


def user(message: str) -> list[Key]:
    """A line the program wrote itself with `daifu.logger`."""
    return [("other", message)]


@dataclass(frozen=True)
class Outcome:
    """What the prototype does with a program.

    crash: the last line plain Python prints when the program runs without DaiFu ('': it runs,
        printing the same results);
    status: the exit status with the prototype; result: the `RESULT` lines it prints;
    record: one run's record as `prototype_view` gives it;
    copy_folder: where `log_program_end` leaves `experiment_record_<time>.log` ('' for the
        working directory), or `None` when the run makes no copy.
    """

    crash: str
    status: int
    result: tuple[str, ...]
    record: tuple[Key, ...]
    copy_folder: str | None


PROGRAMS: dict[str, Outcome] = {
    "fixed_run": Outcome(
        crash="",
        status=0,
        result=("RESULT 0.0679",),
        record=(*begin(), *end("0.0679")),
        copy_folder="",
    ),
    "scope_example": Outcome(
        crash="NameError: name 'lr' is not defined",
        status=0,
        result=("RESULT out 1.0",),
        record=(*begin(), *end("1.0")),
        copy_folder="",
    ),
    "scope_restore": Outcome(
        crash="UnboundLocalError: cannot access local variable 'steps_done' where it is not associated with a value",
        status=0,
        result=("RESULT inside 3 0.1", "RESULT after 100 9.0 3 [0.4, 0.2, 0.1] 0.129024 0.129024"),
        record=(*begin(), *end("0.129024")),
        copy_folder="",
    ),
    "action_class": Outcome(
        crash="RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x4 and 3x8)",
        status=0,
        result=("RESULT Policy 4 1.1877",),
        record=(*begin(), *repair(1, "Action"), *end("1.1877")),
        copy_folder="",
    ),
    "plays_list": Outcome(
        crash="RuntimeError: mat1 and mat2 must have the same dtype, but got Double and Float",
        status=0,
        result=("RESULT [2] [0.1964, 0.478, 0.3337, 0.0722, 0.2745, 0.0779]",),
        record=(*begin(), *repair(1, "Action", "Surgery"), *end("0.0779")),
        copy_folder="",
    ),
    "try_continue": Outcome(
        crash="IndexError: Target 7 is out of bounds.",
        status=0,
        result=("RESULT [0, 1, 2, 4, 5] -1.2194",),
        record=(*begin(), *repair(1, "Surgery"), *end("-1.2194")),
        copy_folder="",
    ),
    "pass_retry": Outcome(
        crash="OSError: [Errno 5] Input/output error (transient)",
        status=0,
        result=("RESULT 100 [0, 1, 2, 2, 3, 4]",),
        record=(*begin(), *repair(1, "Pass"), *end("100")),
        copy_folder="",
    ),
    "milestone_logger": Outcome(
        crash="RuntimeError: NCCL watchdog thread terminated with exception: collective timed out",
        status=0,
        result=("RESULT 0.000305",),
        record=(
            *begin(),
            *user("Program init end"),
            *user("Program Default Checkpoint 1"),
            *repair(1),
            *user("Program Default Checkpoint 3"),
            *user("Program Default Checkpoint 5"),
            *end("0.000305"),
        ),
        copy_folder="runs_log",
    ),
    "numbered_repairs": Outcome(
        crash="RuntimeError: mat1 and mat2 shapes cannot be multiplied (1x12 and 3x1)",
        status=0,
        result=("RESULT [0.5691, 0.4822, 0.4099]",),
        record=(*begin(), *repair(1, "Surgery"), *repair(2, "Action"), *repair(3, "Surgery"), *end("0.4099")),
        copy_folder="",
    ),
    "unanswered_crash": Outcome(
        crash="RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x4 and 3x1)",
        status=1,
        result=(),
        record=(*begin(), *repair(1, "Action"), ("repair_begin", "2"), ("fails", None)),
        copy_folder=None,
    ),
}


REPAIRED_FLOWS = ("repeated", "replay")


@dataclass
class Run:
    """One run of a program, and what its folder held right after it: the record, its copies."""

    folder: Path
    status: int
    stdout: str
    stderr: str
    record: str | None = None
    copies: list[tuple[Path, str]] = field(default_factory=list)

    @property
    def result(self) -> tuple[str, ...]:
        return tuple(line for line in self.stdout.splitlines() if line.startswith("RESULT"))

    @property
    def last_error_line(self) -> str:
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        return lines[-1] if lines else ""

    def explain(self) -> str:
        return f"exit status {self.status}\n--- stdout\n{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-3000:]}"


class Runner(Protocol):
    def run(self, folder: Path, argv: list[str], env: dict[str, str]) -> tuple[int, str, str]: ...

    def close(self) -> None: ...


class SubprocessRunner:
    """Each run a new `python` process."""

    def run(self, folder: Path, argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
        done = subprocess.run([sys.executable, *argv], cwd=folder, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=TIMEOUT)
        return done.returncode, done.stdout, done.stderr

    def close(self) -> None:
        pass


class ForkRunner:
    """Each run a process forked from `tests/seed_runner.py`, which has imported torch once."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen([sys.executable, str(Path(__file__).with_name("seed_runner.py"))],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, start_new_session=True)
        self.numbers = itertools.count()
        self.lock = threading.Lock()
        self.done: dict[str, int] = {}
        self.arrived = threading.Condition()
        threading.Thread(target=self._replies, args=(self.process.stdout,), daemon=True).start()

    def _replies(self, stream: IO[bytes]) -> None:
        for line in stream:
            reply = json.loads(line)
            with self.arrived:
                self.done[reply["id"]] = reply["status"]
                self.arrived.notify_all()

    def run(self, folder: Path, argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
        number = str(next(self.numbers))
        out, err = self.scratch / f"{number}.out", self.scratch / f"{number}.err"
        request = {"id": number, "cwd": str(folder), "argv": argv, "env": env, "stdout": str(out), "stderr": str(err)}
        with self.lock:
            assert self.process.stdin is not None
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            self.process.stdin.flush()
        with self.arrived:
            if not self.arrived.wait_for(lambda: number in self.done, TIMEOUT):
                raise TimeoutError(f"{argv} in {folder} did not end in {TIMEOUT} s")
            status = self.done.pop(number)
        return status, out.read_text(errors="replace"), err.read_text(errors="replace")

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def program_env(**extra: str) -> dict[str, str]:
    """The environment of a person's shell: no DaiFu settings, DaiFu (or the prototype) importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAIFU_") and k != "REPEAT_ACTIONS"}
    env["PYTHONPATH"] = PROTOTYPE or str(ROOT)
    env.update(extra)
    return env


def record_copies(folder: Path) -> list[Path]:
    """The `experiment_record_<time>.log` copies under `folder`, oldest first (by the time in the name)."""
    return sorted(folder.rglob("experiment_record_*.log"), key=lambda path: float(path.stem.split("_")[-1]))


class Session:
    """Runs programs for the tests: `run` runs one and notes what its folder holds after it."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    def run(self, folder: Path, *argv: str, **env: str) -> Run:
        status, stdout, stderr = self.runner.run(folder, list(argv), program_env(**env))
        record = folder / "experiment_record.log"
        return Run(
            folder,
            status,
            stdout,
            stderr,
            record.read_text() if record.exists() else None,
            [(path.parent, path.read_text()) for path in record_copies(folder)],
        )


def copy_program(name: str, base: Path) -> Path:
    folder = base / name
    shutil.copytree(PROGRAMS_DIR / name, folder)
    return folder


def plain_flow(session: Session, name: str, base: Path) -> list[Run]:
    return [session.run(copy_program(name, base), "main.py", DAIFU_MODE="off")]


def repeated_flow(session: Session, name: str, base: Path) -> list[Run]:
    """`for i in range(N): os.system('python main.py')` in one folder, N = 2."""
    folder = copy_program(name, base)
    return [session.run(folder, "main.py") for _ in range(2)]


def replay_flow(session: Session, name: str, base: Path) -> list[Run]:
    return [session.run(copy_program(name, base), "-m", "daifu", "replay", "main.py")]


def lock_flow(session: Session, base: Path) -> list[Run]:
    """A run, then `touch experiment_record.log.lock` and a restarted run, as the large-scale scripts do."""
    folder = copy_program("fixed_run", base)
    first = session.run(folder, "main.py")
    (folder / "experiment_record.log.lock").touch()
    return [first, session.run(folder, "main.py")]


MULTILINE = (
    "import daifu\n"
    "\n"
    "\n"
    "@daifu.transform(globals())\n"
    "def main():\n"
    "    return 1 + 'a'\n"
    "\n"
    "\n"
    "daifu.set_policy(lambda crash: daifu.Raise() if crash.tried else "
    "daifu.Action(\"raise ValueError('first line\\\\nsecond line')\"))\n"
    "main()\n"
)


def multiline_flow(session: Session, base: Path) -> list[Run]:
    folder = base / "refusal"
    folder.mkdir()
    (folder / "main.py").write_text(MULTILINE)
    return [session.run(folder, "main.py")]


def _program_flow(run: Callable[[Session, str, Path], list[Run]], name: str, session: Session, base: Path) -> list[Run]:
    return run(session, name, base)


SAMPLE = ("scope_restore", "plays_list", "numbered_repairs", "unanswered_crash")
"""The programs of the default run: a scope the prototype resolves, an action then a surgery, three numbered
repairs, a crash left unanswered. The others run under the `e2e` marker (CI)."""

NAMES = [pytest.param(name, marks=() if name in SAMPLE else pytest.mark.e2e) for name in sorted(PROGRAMS)]


def selected_programs(items: list[pytest.Item]) -> set[str]:
    """The programs this session's tests of this file check: only their flows are run."""
    here = Path(__file__).resolve()
    return {item.callspec.params["name"] for item in items
            if item.path.resolve() == here and hasattr(item, "callspec") and "name" in item.callspec.params}


def jobs(programs: set[str]) -> dict[str, Callable[[Session, Path], list[Run]]]:
    """Every flow to run for `programs`, by name (`<flow>:<program>`); the DaiFu-only ones not against the prototype."""
    found: dict[str, Callable[[Session, Path], list[Run]]] = {}
    flows: dict[str, Callable[[Session, str, Path], list[Run]]] = {"repeated": repeated_flow}
    if not PROTOTYPE:
        flows.update(plain=plain_flow, replay=replay_flow)
    for name in sorted(programs):
        for flow, run in flows.items():
            found[f"{flow}:{name}"] = functools.partial(_program_flow, run, name)
    found["lock"] = lock_flow
    if not PROTOTYPE:
        found["multiline"] = multiline_flow
    return found


@pytest.fixture(scope="module")
def flows(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> dict[str, list[Run]]:
    """The runs of every flow the selected tests check, run once for the whole file, `PARALLEL` at a time."""
    base = tmp_path_factory.mktemp("seed")
    scratch = Path(tempfile.mkdtemp(dir=base))
    runner: Runner = ForkRunner(scratch) if FORKED else SubprocessRunner()
    session = Session(runner)
    todo = jobs(selected_programs(request.session.items))
    try:
        with ThreadPoolExecutor(PARALLEL) as pool:
            started = {}
            for key, job in todo.items():
                folder = base / key.replace(":", "-")
                folder.mkdir()
                started[key] = pool.submit(job, session, folder)
            return {key: future.result() for key, future in started.items()}
    finally:
        runner.close()


def flow(flows: dict[str, list[Run]], key: str) -> list[Run]:
    if key not in flows:
        pytest.skip("a DaiFu-only flow")
    return flows[key]


def check_run(run: Run, expected: Outcome) -> None:
    """The run did what the prototype does: exit status, printed results, record, record copy."""
    assert run.status == expected.status, run.explain()
    assert run.result == expected.result, run.explain()
    assert run.record is not None, run.explain()
    assert prototype_view(parse(run.record)) == list(expected.record), run.record
    if expected.copy_folder is None:
        assert run.copies == []
    else:
        assert [parent for parent, _ in run.copies] == [run.folder / expected.copy_folder]
        assert run.copies[0][1] == run.record


@pytest.mark.parametrize("name", NAMES)
def test_plain_python_crashes_as_designed_or_runs(name: str, flows: dict[str, list[Run]]) -> None:
    expected = PROGRAMS[name]
    (run,) = flow(flows, f"plain:{name}")
    if expected.crash:
        assert run.status == 1 and run.last_error_line == expected.crash, run.explain()
    else:
        assert run.status == 0 and run.result == expected.result, run.explain()


@pytest.mark.parametrize("name", NAMES)
def test_recorded_repairs_replay_as_in_the_prototype(name: str, flows: dict[str, list[Run]]) -> None:
    check_run(flow(flows, f"repeated:{name}")[0], PROGRAMS[name])


@pytest.mark.parametrize("name", NAMES)
def test_daifu_replay_command_runs_the_seed_record(name: str, flows: dict[str, list[Run]]) -> None:
    check_run(flow(flows, f"replay:{name}")[0], PROGRAMS[name])


@pytest.mark.parametrize("name", NAMES)
def test_repeated_experiments_leave_one_record_copy_per_run(name: str, flows: dict[str, list[Run]]) -> None:
    """Each run leaves its own record copy, read as one run's record; the record holds the last run."""
    expected = PROGRAMS[name]
    runs = flow(flows, f"repeated:{name}")
    for run in runs:
        assert run.status == expected.status and run.result == expected.result, run.explain()
    last = runs[-1]
    assert last.record is not None and prototype_view(parse(last.record)) == list(expected.record), last.record
    assert len(last.copies) == (0 if expected.copy_folder is None else 2)
    for _, text in last.copies:
        events = parse(text)
        assert prototype_view(events) == list(expected.record), text
        ended = [int(e.argument) for e in events if e.kind == "repair_end" and e.argument is not None]
        spans = restore_seconds(events)
        assert sorted(spans) == ended and all(seconds >= 0 for seconds in spans.values())
    if last.copies:
        assert last.copies[-1][1] == last.record


def test_a_lock_file_continues_the_record_of_a_resumed_run(flows: dict[str, list[Run]]) -> None:
    """The large-scale scripts `touch experiment_record.log.lock` before restarting a crashed run:
    the next run appends to the record without a new `Program Begin`; `log_program_end` removes the lock."""
    first, second = flow(flows, "lock")
    assert first.status == 0 and second.status == 0, second.explain()
    assert second.record is not None
    assert prototype_view(parse(second.record)) == [*begin(), *end("0.0679"), *end("0.0679")], second.record
    assert not (second.folder / "experiment_record.log.lock").exists()
    assert len(second.copies) == 2 and second.copies[-1][1] == second.record


def test_the_record_reader_reads_a_prototype_record() -> None:
    """`tests/seed_record.py` on the lines of a record the prototype wrote (its demo's, abridged)."""
    text = (
        "2025-05-30 20:41:36.206 | INFO     | daifu:<module>:36 - Program Begin\n"
        "2025-05-30 20:41:36.871 | INFO     | daifu.repair:repair:444 - Repair 1 Begin\n"
        "2025-05-30 20:42:15.715 | INFO     | daifu.repair:do_action:151 - Repairing... Action\n"
        "2025-05-30 20:42:18.577 | INFO     | daifu.repair:repair:532 - Repair 1 End\n"
        "2025-05-30 20:42:19.001 | INFO     | __main__:main_daifu_cell_1:4 - Program init end\n"
        "2025-05-30 20:42:19.002 | WARNING  | rank 1 | daifu.record:note:133 - a note DaiFu adds\n"
        "2025-05-30 20:42:20.000 | INFO     | daifu:log_program_end:40 - Program End with Quality Measure 0.99\n"
    )
    events = parse(text)
    assert prototype_view(events) == [
        *begin(),
        *repair(1, "Action"),
        *user("Program init end"),
        *end("0.99"),
    ]
    assert restore_seconds(events) == {1: pytest.approx(41.706)}


def test_a_multiline_refusal_keeps_the_record_one_event_per_line(flows: dict[str, list[Run]]) -> None:
    """A line-oriented reader must be able to read every DaiFu record: a refusal whose reason quotes a
    multi-line exception message (as many PyTorch errors are) must stay on one record line."""
    (run,) = flow(flows, "multiline")
    assert run.status == 1 and run.last_error_line.startswith("TypeError"), run.explain()
    assert run.record is not None
    events = parse(run.record)
    assert prototype_view(events) == [*begin(), ("repair_begin", "1"), ("fails", None)]
    assert any("first line ⏎ second line" in line for line in run.record.splitlines())
