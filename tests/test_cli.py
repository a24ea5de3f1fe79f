"""The `daifu` command: running a script it does not edit, reading the record, usage errors."""

# ruff: noqa: E402
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pexpect")

from daifu.cli import main as cli
from tests.terminal import PROGRAMS, TIMEOUT, child_env, program, spawn

DAIFU = str(Path(sys.executable).parent / "daifu")


def recorded(tmp_path: Path, *entries: dict[str, object]) -> Path:
    path = tmp_path / "daifu_workspace" / "repairs.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(entry) + "\n" for entry in entries))
    return path


ENTRY = {
    "time": "2026-01-02T03:04:05+0000",
    "repair": 1,
    "function": "main",
    "file": "/x/train.py",
    "line": 12,
    "exception_type": "TypeError",
    "decision": "Surgery",
    "code": "def main():\n    pass\n",
    "duration_ms": 12.5,
    "decided_by": "console",
    "pid": 7,
}


def test_run_vaccinates_a_script_that_does_not_import_daifu(tmp_path: Path) -> None:
    before = (PROGRAMS / "plain.py").read_text()
    terminal = spawn(tmp_path, ["run", program("plain.py"), "--lr", "3"], command=DAIFU)
    assert "TypeError" in terminal.wait_prompt()
    terminal.command("skip")
    out = terminal.leave("q")
    assert "FINAL out=[3, 5, 9] argv=['--lr', '3']" in out and terminal.status == 0
    assert (PROGRAMS / "plain.py").read_text() == before


def test_replay_command_reapplies_the_last_run(tmp_path: Path) -> None:
    terminal = spawn(tmp_path, ["run", program("plain.py")], command=DAIFU)
    terminal.wait_prompt()
    terminal.command("skip")
    terminal.leave("q")
    result = subprocess.run(
        [DAIFU, "replay", program("plain.py")],
        env=child_env(tmp_path),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert "FINAL out=[3, 5, 9]" in result.stdout and result.returncode == 0, result.stderr


def test_an_unvaccinated_run_raises_as_python_would(tmp_path: Path) -> None:
    result = subprocess.run(
        [DAIFU, "run", program("plain.py")],
        env=child_env(tmp_path),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 1 and "TypeError: unsupported operand" in result.stderr


def test_missing_script_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", "no_such_script.py"]) == 2
    assert "no such script: no_such_script.py" in capsys.readouterr().err


def test_unknown_entry_names_the_functions_there_are(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", "--entry", "train", program("plain.py")]) == 2
    assert "has no function 'train' to vaccinate (its functions: scale, main)" in capsys.readouterr().err


def test_show_lists_what_where_and_how_long(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recorded(tmp_path, ENTRY, {**ENTRY, "decision": "Pass", "code": None, "duration_ms": 12000.0, "line": 20})
    assert cli.main(["show"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [cell.strip() for cell in lines[0].split("  ") if cell.strip()] == [
        "#", "time", "function", "where", "exception", "decision", "decided by", "suggested by", "restore"]
    assert lines[1].split() == [
        "1",
        "2026-01-02",
        "03:04:05",
        "main",
        "train.py:12",
        "TypeError",
        "Surgery",
        "person",  # an old record's `console`: a person decided, and suggested it too
        "person",
        "12",
        "ms",
    ]
    assert lines[2].split()[-5:] == ["Pass", "person", "person", "12.0", "s"]


def test_show_says_who_decided_apart_from_who_suggested_and_the_wait_apart_from_the_restore(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recorded(
        tmp_path,
        {**ENTRY, "decided_by": "bot"},  # old records: the bot's, applied automatically...
        {**ENTRY, "decided_by": "bot", "decided_by_person": "alice"},  # ... or by a person on the page
        {**ENTRY, "decided_by": "person", "suggested_by": "bot", "decided_at": "approval page",
         "decided_by_person": "bob", "duration_ms": 40.0, "waited_ms": 59700.0},
        {**ENTRY, "decided_by": "automatic", "suggested_by": "bot"},
    )
    assert cli.main(["show"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [cell.strip() for cell in lines[0].split("  ") if cell.strip()][-4:] == [
        "decided by", "suggested by", "restore", "wait for a person"]
    assert [line.split()[7:] for line in lines[1:]] == [
        ["automatic", "bot", "12", "ms", "-"],
        ["alice", "bot", "12", "ms", "-"],
        ["bob", "bot", "40", "ms", "59.7", "s"],
        ["automatic", "bot", "12", "ms", "-"],
    ]


def test_show_without_a_record_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["show"]) == 0
    captured = capsys.readouterr()
    assert "No record at" in captured.err and "No repairs recorded." in captured.out


def test_report_shows_one_repair_with_its_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = recorded(tmp_path, ENTRY)
    assert cli.main(["report", "--record", str(path), "1"]) == 0
    out = capsys.readouterr().out
    assert "decision: Surgery" in out and "    def main():" in out
    assert cli.main(["report", "--record", str(path), "2"]) == 2
    assert "no repair 2 in the record (1 recorded)" in capsys.readouterr().err


@pytest.mark.parametrize("command", [[], ["run"], ["replay"], ["show"], ["report"], ["serve"], ["demo"]])
def test_every_command_has_help(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as leaving:
        cli.main([*command, "--help"])
    assert leaving.value.code == 0 and "usage: daifu" in capsys.readouterr().out


def test_the_console_script_is_installed(tmp_path: Path) -> None:
    result = subprocess.run([DAIFU, "--help"], capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 0 and "replay" in result.stdout
    result = subprocess.run([DAIFU, "nonsense"], capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 2


def test_a_crash_let_through_shows_the_users_frames_and_none_of_the_launchers(tmp_path: Path) -> None:
    result = subprocess.run(
        [DAIFU, "run", program("plain.py")],
        env=child_env(tmp_path),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    traceback = result.stderr[result.stderr.index("Traceback (most recent call last):"):]
    frames = [line.strip() for line in traceback.splitlines() if line.strip().startswith("File ")]
    assert result.returncode == 1, result.stderr
    assert frames[0] == f'File "{program("plain.py")}", line 19, in <module>', frames
    assert not [frame for frame in frames if "daifu/cli" in frame or "bin/daifu" in frame], frames
    assert f'File "{program("plain.py")}", line 7, in scale' in frames[-1]
    assert traceback.rstrip().endswith("TypeError: unsupported operand type(s) for *: 'NoneType' and 'int'")


@pytest.mark.parametrize("command", [["show"], ["report", "1"], ["--help"]])
def test_a_command_piped_into_head_ends_quietly(tmp_path: Path, command: list[str]) -> None:
    recorded(tmp_path, *[{**ENTRY, "repair": n, "code": "def main():\n" + "    pass\n" * 20000} for n in (1, 2)])
    result = subprocess.run(
        f"{' '.join([DAIFU, *command])} | head -2",
        shell=True,
        env=child_env(tmp_path, DAIFU_WORKSPACE=str(tmp_path / "daifu_workspace")),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert len(result.stdout.splitlines()) == 2 and result.stderr == "", result.stderr
