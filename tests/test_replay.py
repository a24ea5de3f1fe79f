"""Replaying a recorded run: no input, the same decisions, and a clear stop where the run departs."""

# ruff: noqa: E402
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pexpect")

from tests.terminal import TIMEOUT, child_env, line_of, program, spawn

FAULTY = "total = total + item"


def run_without_terminal(tmp_path: Path, name: str = "accumulate.py", **extra: str) -> subprocess.CompletedProcess[str]:
    """`name` run with no terminal and no input: a replay must not need one."""
    return subprocess.run(
        [sys.executable, program(name)],
        env=child_env(tmp_path, **extra),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def workspace_file(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / "ws" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def record_lines(tmp_path: Path) -> list[str]:
    return (tmp_path / "experiment_record.log").read_text().splitlines()


def test_repeat_actions_replays_a_console_surgery(tmp_path: Path) -> None:
    terminal = spawn(tmp_path, [program("accumulate.py")])
    terminal.wait_prompt()
    terminal.command("focus")
    terminal.surgery_file().write_text(terminal.surgery_file().read_text().replace("total + item", "total + int(item)"))
    terminal.command("surgery")
    first = terminal.leave("q")
    replayed = run_without_terminal(tmp_path, REPEAT_ACTIONS='["Surgery"]')
    assert "FINAL total=10 seen=[1, 2, '3', 4]" in first and "FINAL total=10 seen=[1, 2, '3', 4]" in replayed.stdout
    assert replayed.returncode == 0


def test_repeat_actions_reads_the_action_file(tmp_path: Path) -> None:
    workspace_file(tmp_path, "(action-1)main.py", "item = int(item)\n")
    result = run_without_terminal(tmp_path, REPEAT_ACTIONS='["Action"]')
    assert "FINAL total=10 seen=[1, 2, 3, 4]" in result.stdout


def test_a_list_of_plays_answers_one_crash_in_order(tmp_path: Path) -> None:
    """`[['Action', 'Surgery']]`: the action converts the item at hand, the surgery changes a later line;
    both are carried out for the one crash, then the run resumes once, at the faulty statement."""
    workspace_file(tmp_path, "(action-1)main.py", "item = int(item)\n")
    source = (Path(program("accumulate.py")).read_text().split("@daifu.transform\n", 1)[1]).split("\n\n\n")[0]
    workspace_file(tmp_path, "(surgery-1)main.py", source.replace("seen.append(item)", "seen.append(str(item))"))
    result = run_without_terminal(tmp_path, REPEAT_ACTIONS='[["Action", "Surgery"]]')
    assert "FINAL total=10 seen=[1, 2, '3', '4']" in result.stdout, result.stderr
    events = [line.rsplit(" - ", 1)[1] for line in record_lines(tmp_path)]
    assert events[1:5] == ["Repair 1 Begin", "Repairing... Action", "Repairing... Surgery", "Repair 1 End"]


def test_pass_in_a_seed_record_runs_the_statement_again(tmp_path: Path) -> None:
    """The prototype's `Pass` changes nothing and retries (here the item is still bad: a second crash,
    repair 2); DaiFu's `Skip` goes on after the statement."""
    result = run_without_terminal(tmp_path, REPEAT_ACTIONS='["Pass", "Skip"]')
    assert "FINAL total=7 seen=[1, 2, '3', 4]" in result.stdout, result.stderr
    events = [line.rsplit(" - ", 1)[1] for line in record_lines(tmp_path)]
    assert [e for e in events if e.startswith(("Repair", "Repairing"))] == [
        "Repair 1 Begin", "Repairing... Pass", "Repair 1 End", "Repair 2 Begin", "Repairing... Skip", "Repair 2 End",
    ]


def test_mode_replay_reapplies_the_recorded_run(tmp_path: Path) -> None:
    terminal = spawn(tmp_path, [program("accumulate.py")])
    terminal.wait_prompt()
    terminal.command("focus")
    terminal.action_file().write_text("item = int(item)\n")
    terminal.command("action")
    terminal.leave("q")
    (tmp_path / "ws" / "(action-1)main.py").unlink()  # the record carries the code itself
    result = run_without_terminal(tmp_path, DAIFU_MODE="replay")
    assert "FINAL total=10 seen=[1, 2, 3, 4]" in result.stdout, result.stderr
    entries = [json.loads(line) for line in (tmp_path / "ws" / "repairs.jsonl").read_text().splitlines()]
    assert [(e["decision"], e["decided_by"]) for e in entries] == [("Action", "person"), ("Action", "replay")]
    again = run_without_terminal(tmp_path, DAIFU_MODE="replay")  # the replayed run is not what is replayed
    assert "FINAL total=10 seen=[1, 2, 3, 4]" in again.stdout, again.stderr


def test_a_crash_that_does_not_match_the_record_stops_the_replay(tmp_path: Path) -> None:
    entry = {
        "repair": 1,
        "function": "main",
        "line": 99,
        "exception_type": "TypeError",
        "decision": "Pass",
        "code": None,
        "decided_by": "console",
        "pid": 1,
    }
    workspace_file(tmp_path, "repairs.jsonl", json.dumps(entry) + "\n")
    result = run_without_terminal(tmp_path, DAIFU_MODE="replay")
    line = line_of("accumulate.py", FAULTY)
    assert (
        f"repair 1 does not match: the record has TypeError in main line 99, this run has TypeError in main line {line}"
        in result.stderr
    )
    assert result.returncode == 1 and "TypeError: unsupported operand" in result.stderr
    assert any("DaiFu replay stopped" in line for line in record_lines(tmp_path))


def test_a_missing_workspace_file_stops_the_replay(tmp_path: Path) -> None:
    result = run_without_terminal(tmp_path, REPEAT_ACTIONS='["Surgery"]')
    assert "repair 1 cannot be replayed" in result.stderr and "(surgery-1)main.py" in result.stderr
    assert result.returncode == 1


def test_a_stopped_replay_falls_back_to_the_console(tmp_path: Path) -> None:
    terminal = spawn(tmp_path, [program("accumulate.py")], REPEAT_ACTIONS='["Nonsense"]')
    terminal.wait_prompt()
    terminal.command("skip")
    out = terminal.leave("q")
    assert "FINAL total=7" in out
