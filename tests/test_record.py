"""The run's record: `Program End` however the program ends, and one numbering of repairs for every reader.

Programs run in real subprocesses, as a user runs them; the record files are read as written.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from daifu.cli import main as cli
from daifu.store.lines import LineFile

PROGRAM = """
import daifu

def policy(crash):
    if crash.locals["item"] == "2":
        return daifu.Action("item = int(item)")
    return daifu.Skip()

daifu.set_policy(policy)

@daifu.transform
def add_all(items):
    total = 0
    for item in items:
        total = total + item
    return total

print("total", add_all([1, "2", 3, "4"]))
"""


def run(tmp_path: Path, ending: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(PROGRAM) + textwrap.dedent(ending))
    variables = {k: v for k, v in os.environ.items() if not k.startswith("DAIFU_")}
    variables.update(DAIFU_WORKSPACE=str(tmp_path / "daifu_workspace"), DAIFU_RECORD=str(tmp_path / "experiment_record.log"))
    variables.update(env)
    return subprocess.run(
        [sys.executable, str(script)], env=variables, cwd=tmp_path, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def messages(path: Path) -> list[str]:
    """Each line's level and message (`INFO | Program End`), without its time stamp."""
    found = []
    for line in path.read_text().splitlines():
        stamp, level, _where, message = re.fullmatch(r"(\S+ \S+) \| (\S+) *\| (.*?) - (.*)", line).groups()  # type: ignore[union-attr]
        found.append(f"{level} | {message}")
    return found


def test_a_normal_run_ends_its_record_with_program_end(tmp_path: Path) -> None:
    done = run(tmp_path)
    assert done.returncode == 0 and "total 6" in done.stdout, done.stderr
    assert messages(tmp_path / "experiment_record.log") == [
        "INFO | Program Begin",
        "INFO | Repair 1 Begin",
        "INFO | Repairing... Action",
        "INFO | Repair 1 End",
        "INFO | Repair 2 Begin",
        "INFO | Repairing... Skip",
        "INFO | Repair 2 End",
        "INFO | Program End",
    ]


def test_daifu_record_naming_a_folder_puts_the_record_in_it(tmp_path: Path) -> None:
    """A folder in `DAIFU_RECORD` (one that exists, or written with a trailing `/`) holds
    `experiment_record.log`; it once left the run with no record and a warning."""
    (tmp_path / "records").mkdir()
    done = run(tmp_path, DAIFU_RECORD=str(tmp_path / "records"))
    assert done.returncode == 0 and "RuntimeWarning" not in done.stderr, done.stderr
    assert messages(tmp_path / "records" / "experiment_record.log")[-1] == "INFO | Program End"
    done = run(tmp_path, DAIFU_RECORD=str(tmp_path / "new-folder") + "/")
    assert done.returncode == 0 and "RuntimeWarning" not in done.stderr, done.stderr
    assert messages(tmp_path / "new-folder" / "experiment_record.log")[0] == "INFO | Program Begin"


def test_a_program_that_logs_its_end_gets_one_program_end(tmp_path: Path) -> None:
    done = run(tmp_path, "daifu.log_program_end(0.93)\n")
    assert done.returncode == 0, done.stderr
    ends = [m for m in messages(tmp_path / "experiment_record.log") if "Program End" in m]
    assert ends == ["INFO | Program End with Quality Measure 0.93"]


def test_a_program_ended_by_an_exception_says_so_in_its_last_line(tmp_path: Path) -> None:
    done = run(tmp_path, "raise KeyError('checkpoint_config')\n")
    assert done.returncode == 1 and "KeyError: 'checkpoint_config'" in done.stderr
    last = messages(tmp_path / "experiment_record.log")[-1]
    assert last == "ERROR | Program End with Exception KeyError: 'checkpoint_config'"


def test_show_and_report_number_the_repairs_of_two_ranks_alike(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for rank in ("0", "1"):  # two ranks of one job (RANK, WORLD_SIZE), each with two crashes at one line
        done = run(tmp_path, RANK=rank, WORLD_SIZE="2")
        assert done.returncode == 0, done.stderr
    workspace = tmp_path / "daifu_workspace"
    assert sorted(p.name for p in workspace.glob("repairs*.jsonl")) == ["repairs.rank0.jsonl", "repairs.rank1.jsonl"]
    assert messages(tmp_path / "experiment_record.rank1.log")[-1] == "INFO | Program End"

    assert cli.main(["show"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [row[0] for row in rows] == ["1", "2", "3", "4"]
    assert sorted((row[-1], row[6]) for row in rows) == [("0", "Action"), ("0", "Skip"), ("1", "Action"), ("1", "Skip")]
    for row in rows:
        assert cli.main(["report", row[0]]) == 0
        shown = dict(
            line.strip().split(": ", 1) for line in capsys.readouterr().out.splitlines() if ": " in line[:19]
        )
        assert (shown["rank"], shown["decision"], f"job.py:{shown['line']}") == (row[-1], row[6], row[4])
        assert shown["statement"] == "total = total + item"


def test_each_repair_is_a_line_of_repairs_jsonl_even_when_the_file_was_removed_between_them(tmp_path: Path) -> None:
    ending = """
    import os
    os.remove(os.path.join(os.environ["DAIFU_WORKSPACE"], "repairs.jsonl"))  # a person clearing the record
    print("again", add_all(["1", 2]))
    """
    done = run(tmp_path, ending)
    assert done.returncode == 0 and "again 2" in done.stdout, done.stderr  # "1" skipped by the policy
    lines = (tmp_path / "daifu_workspace" / "repairs.jsonl").read_text().splitlines()
    assert [json.loads(line)["repair"] for line in lines] == [3]  # written again at its path, not lost
    assert [m for m in messages(tmp_path / "experiment_record.log") if "End" in m] == [
        "INFO | Repair 1 End", "INFO | Repair 2 End", "INFO | Repair 3 End", "INFO | Program End"]


def test_a_line_file_that_follows_its_path_writes_to_the_file_now_there(tmp_path: Path) -> None:
    path = tmp_path / "lines.jsonl"
    lines = LineFile(path, follow=True)
    lines.write("one")
    (tmp_path / "other").write_text("zero\n")
    os.replace(tmp_path / "other", path)  # a rotation puts another file at the path
    lines.write("two")
    path.unlink()
    lines.write("three")
    lines.close()
    assert path.read_text() == "three\n"


def test_a_surgery_in_short_is_what_it_changes_in_the_version_it_is_compared_with() -> None:
    """The stripped lines of the running version are kept per source text (`record._stripped_lines`):
    a surgery compared with another version, and then with the first again, gets each one's answer."""
    from daifu.core.decisions import Surgery
    from daifu.store.record import code_in_short

    first = "def f(x):\n    y = x\n    return y\n"
    second = "def f(x):\n    z = x\n    return z\n"
    surgery = Surgery("def f(x):\n    y = x\n    return y + 1\n")
    assert code_in_short(surgery, first) == "return y + 1"
    assert code_in_short(surgery, second) == "y = x; return y + 1"
    assert code_in_short(surgery, first) == "return y + 1"
    assert code_in_short(Surgery(second), second) == ""
