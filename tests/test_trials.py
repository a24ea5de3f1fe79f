"""Trials: a candidate repair tried on a sandboxed copy of the live run, never touching the real one."""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import daifu
from daifu.core import sandbox, trial
from daifu.core.trial import Outcome

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(trial.unavailable() is not None, reason=f"no trials here: {trial.unavailable()}"),
]
nn = torch.nn


def verdicts_of(*decisions: Any) -> list[daifu.Verdict]:
    """A policy trying each decision at the first crash, then raising; returns the verdicts (filled later)."""
    found: list[daifu.Verdict] = []

    def policy(crash: daifu.Crash) -> Any:
        if not found:
            found.extend(crash.trial(decision, 10.0) for decision in decisions)
        return daifu.Raise()

    daifu.set_policy(policy)
    return found


def small_run() -> tuple[nn.Module, torch.optim.Optimizer, list[torch.Tensor]]:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.1), [torch.randn(8, 4) for _ in range(3)]


def test_a_trial_that_writes_a_checkpoint_or_a_file_leaves_the_file_system_untouched(tmp_path: Path) -> None:
    model, optimizer, batches = small_run()
    batches[1] = torch.randn(8, 5)
    checkpoint, log = tmp_path / "model.pt", tmp_path / "log.txt"

    @daifu.transform
    def train(model, optimizer, batches, checkpoint, log, how):
        for x in batches:
            loss = model(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if how == "torch.save":
                torch.save(model.state_dict(), checkpoint)
            else:
                with open(log, "w") as stream:
                    stream.write("step\n")

    fix = daifu.Action("x = x[:, :4]")
    for how in ("torch.save", "open"):
        found = verdicts_of(fix)
        with pytest.raises(RuntimeError):
            train(model, optimizer, batches, checkpoint, log, how)
        assert found[0].outcome is Outcome.STOPPED_AT_EFFECT and found[0].passed, found[0]
        assert ("torch.save" if how == "torch.save" else "for writing") in found[0].detail
    # the real run wrote what it wrote before the crash; the trials wrote nothing
    assert checkpoint.exists() and log.exists()
    before = checkpoint.stat().st_mtime_ns, log.stat().st_mtime_ns
    found = verdicts_of(fix, fix)
    with pytest.raises(RuntimeError):
        train(model, optimizer, [batches[1]], checkpoint, log, "torch.save")
    assert (checkpoint.stat().st_mtime_ns, log.stat().st_mtime_ns) == before and len(found) == 2


def test_spawning_a_process_or_connecting_is_dangerous_and_never_happens(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]

    @daifu.transform
    def step(x):
        return 1 / x

    found = verdicts_of(
        daifu.Action(f"import subprocess\nsubprocess.run(['touch', {str(marker)!r}])\nx = 1"),
        daifu.Action(f"import os\nos.system('touch {marker}')\nx = 1"),
        daifu.Action(f"import socket\nsocket.create_connection(('127.0.0.1', {port}))\nx = 1"),
    )
    with pytest.raises(ZeroDivisionError):
        step(0)
    assert [v.outcome for v in found] == [Outcome.DANGEROUS] * 3, found
    assert not any(v.passed for v in found)
    assert not marker.exists()
    with pytest.raises(TimeoutError):
        listener.accept()
    listener.close()


def test_the_seccomp_barrier_stops_native_writes_that_no_python_hook_sees(tmp_path: Path) -> None:
    target = tmp_path / "native.bin"
    libc = ctypes.CDLL(None, use_errno=True)  # loaded here: the child loads nothing
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.dup2(write_end, 0)  # the sandbox lets a trial write to 0, 1 and 2 only
            sandbox._filter_system_calls()
            fd = libc.open(str(target).encode(), os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(0, f"{fd} {ctypes.get_errno()}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 100).decode()
    os.waitpid(pid, 0)
    fd, error = (int(part) for part in answer.split())
    assert fd == -1 and error == sandbox.SANDBOX_ERRNO and not target.exists()


def test_the_verdicts_of_harmful_repairs_refuse_them() -> None:
    """A re-created model, the skip of a NaN check, a skip leaving a stale value: each refused by its trial."""
    model, optimizer, batches = small_run()
    batches[1] = batches[1].clone()
    batches[1][0, 0] = float("nan")

    @daifu.transform
    def train(model, optimizer, batches):
        for x in batches:
            if not torch.isfinite(x).all():
                raise ValueError("a NaN batch")
            loss = model(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    found = verdicts_of(
        daifu.Action("model = torch.nn.Linear(4, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)"),
        daifu.Skip(),
        daifu.SkipIteration(),
    )
    with pytest.raises(ValueError):
        train(model, optimizer, batches)
    recreated, nan_skip, iteration_skip = found
    assert recreated.discarded and not recreated.passed and "re-created" in recreated.describe()
    assert nan_skip.spoilt and not nan_skip.passed and "spoils the run" in nan_skip.describe()
    assert iteration_skip.passed and "state kept" in iteration_skip.describe()
    assert all(torch.isfinite(p).all() for p in model.parameters())  # the real run was never touched


def test_a_skip_leaving_a_stale_value_fails_its_trial() -> None:
    model, optimizer, batches = small_run()
    batches[1] = torch.randn(8, 5)

    @daifu.transform
    def train(model, optimizer, batches):
        for x in batches:
            loss = model(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    found = verdicts_of(daifu.Skip())
    with pytest.raises(RuntimeError):
        train(model, optimizer, batches)
    assert found[0].outcome is Outcome.RAISED and "backward" in found[0].detail and not found[0].passed


def test_a_trial_that_never_ends_is_stopped_at_its_budget() -> None:
    @daifu.transform
    def f(x):
        return 1 / x

    found: list[daifu.Verdict] = []
    daifu.set_policy(lambda crash: found.append(crash.trial(daifu.Action("while True:\n    pass"), 0.5)) or daifu.Raise())
    with pytest.raises(ZeroDivisionError):
        f(0)
    assert found[0].outcome is Outcome.TIMED_OUT and not found[0].passed


def test_a_trial_of_a_process_computing_on_a_pool_of_threads_computes_in_its_copy() -> None:
    """The suite computes on one thread (tests/conftest.py); a user's program has a pool of a thread per
    core, busy at the crash, which a fork copies without its threads: the copy must still compute."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        a = torch.randn(512, 512)
        expected = float((a @ a)[0].sum())  # a product this size runs on the pool

        @daifu.transform
        def f(a, row):
            loss = (a @ a)[row].sum()  # the crash, after the product: the copy computes it again
            return float(loss)

        found: list[daifu.Verdict] = []
        first_row = daifu.Action("row = 0")
        daifu.set_policy(lambda crash: found.append(crash.trial(first_row, 20.0)) or first_row)
        assert f(a, 512) == expected
    finally:
        torch.set_num_threads(threads)
    assert found[0].outcome is Outcome.COMPLETED and found[0].passed, found[0].describe()
    assert found[0].ended == "the function returned", found[0].describe()  # not stuck at its budget


def test_a_trial_leaves_the_parent_untouched_and_its_output_captured(capfd: pytest.CaptureFixture[str]) -> None:
    counter = {"n": 0}

    @daifu.transform
    def f(x):
        print("parent output")
        return 1 / x

    found: list[daifu.Verdict] = []
    daifu.set_policy(
        lambda crash: found.append(crash.trial(daifu.Action("print('child output')\ncounter['n'] += 1\nx = 1")))
        or daifu.Raise()
    )
    with pytest.raises(ZeroDivisionError):
        f(0)
    out = capfd.readouterr().out
    assert counter == {"n": 0} and "child output" not in out and "child output" in found[0].output


def test_automatic_mode_records_every_trial_and_says_what_it_applied(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from repairbot.server import start_in_thread

    url, stop = start_in_thread(backend="rules")
    try:
        daifu.configure(mode="automatic", approve="auto", bot_url=url, workspace=tmp_path / "ws")

        @daifu.transform
        def halves(xs):
            n = len(xs) / 2
            return xs[:n]

        assert halves([1, 2, 3, 4]) == [1, 2]
    finally:
        stop()
    err = capfd.readouterr().err
    assert "repair bot (rules" in err and "trial: the call finished" in err  # no loop: it ran to the return
    assert "state kept" in err and "resumed in" in err
    entry = daifu_repairs(tmp_path / "ws")[-1]
    assert entry["trials"] and entry["trials"][0]["verdict"] == "completed"


def daifu_repairs(workspace: Path) -> list[dict[str, Any]]:
    from daifu.store.repairs import all_repairs

    return all_repairs(workspace)


def test_trials_turned_off_say_so_and_fall_back_to_what_cannot_discard_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DAIFU_TRIALS", "off")
    code = (
        "import daifu\n"
        "daifu.configure(mode='automatic', approve='auto')\n"
        "@daifu.transform\n"
        "def halves(xs):\n"
        "    n = len(xs) / 2\n"
        "    return xs[:n]\n"
        "print(halves([1, 2, 3, 4]))\n"
    )
    script = tmp_path / "halves.py"
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "[1, 2]" in done.stdout
    assert done.stderr.count("no trial of a repair can run here: trials are turned off") == 1
    assert "Action `n = int(n)`" in done.stderr



class OneSuggestion:
    """A repair-bot backend answering every crash with one fixed suggestion."""

    name = "fixed"

    def __init__(self, kind: str, code: str = "") -> None:
        from repairbot.protocol import Culprit, Diagnosis, Suggestion

        self.suggestion = Suggestion(kind=kind, code=code, explanation="fixed", confidence=0.9)
        self.diagnosis = Diagnosis(category="test", culprit=Culprit(function="f", filename="f", lineno=1,
                                                                    reason="test"), explanation="a test")

    def suggest(self, report: Any, deadline: Any = None) -> Any:
        from repairbot.backends.base import Answer

        return Answer(self.diagnosis, [self.suggestion], self.name)

    diagnose = suggest

    def info(self) -> Any:
        from repairbot.protocol import BackendInfo

        return BackendInfo(name=self.name, available=True, detail="test")


def test_a_repair_that_spoils_the_run_later_is_reported_and_automatic_repairs_there_stop(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from repairbot.server import start_in_thread

    model, optimizer, batches = small_run()
    batches = [b * 0.1 for b in batches * 3]
    batches[1] = torch.randn(8, 5)
    # passes a trial that ends with the crashed iteration (a horizon of 0: the horizon refuses it,
    # tests/test_trial_horizon.py), then the run diverges: the watch sees it within 3 iterations
    url, stop = start_in_thread(backend=OneSuggestion("action", "x = x[:, :4]\nscale = 1e18"))
    try:
        daifu.configure(mode="automatic", approve="auto", bot_url=url, workspace=tmp_path / "ws", trial_iterations=0)

        @daifu.transform
        def train(model, optimizer, batches):
            scale = 1.0
            for x in batches:
                loss = model(x).pow(2).mean() * scale
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            return loss

        train(model, optimizer, batches)
    finally:
        stop()
    err = capfd.readouterr().err
    assert "was followed by non-finite values" in err and "no more automatic repairs there" in err
    from daifu.state import RUN

    assert any(site[0].endswith("train") for site in RUN.distrusted)


def two_faults(batch, where):
    scale = 2.0
    if where == "scale":
        return batch[5] * scale
    return batch[7]


def test_a_new_crash_counts_against_a_watched_repair_only_when_it_reads_what_the_repair_changed() -> None:
    from daifu.core.decisions import Action, Retry, SkipIteration
    from daifu.decide import watch
    from daifu.state import RUN
    from tests.botfixtures import crash_from

    first, reads_scale = crash_from(two_faults, [1], "other"), crash_from(two_faults, [1], "scale")
    assert watch.footprint(Retry(), first) == frozenset()
    assert watch.footprint(Action("import os\nos.makedirs('runs', exist_ok=True)"), first) == {"os"}
    assert watch.footprint(Action("import time as _daifu_time\n_daifu_time.sleep(1)\ndel _daifu_time"), first) == set()
    assert watch.footprint(SkipIteration(), first) is None  # cannot be told: every new crash counts
    RUN.reset()
    watch.start(first, 1, Action("import os\nos.makedirs('runs', exist_ok=True)"))
    watch.new_crash(reads_scale)  # reads nothing the folder-making action changed
    assert first.site not in RUN.distrusted
    watch.start(first, 2, Action("scale = 1e18"))
    watch.new_crash(reads_scale)
    assert first.site in RUN.distrusted
    RUN.reset()
