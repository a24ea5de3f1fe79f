"""The `(DaiFu)` console, typed at through a real pseudo-terminal; one behaviour per test."""

# ruff: noqa: E402
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("pexpect")

from daifu.console.session import COMMANDS
from tests.terminal import Terminal, line_of, program, spawn

FAULTY = "total = total + item"
FIXED_SOURCE = ("total + item", "total + int(item)")


def crashed(tmp_path: Path, name: str = "accumulate.py", **options: object) -> Terminal:
    """`name` started under a terminal and stopped at its crash, at the prompt."""
    terminal = spawn(tmp_path, [program(name)], **options)  # type: ignore[arg-type]
    terminal.wait_prompt()
    return terminal


def fix_surgery_file(terminal: Terminal, old: str, new: str) -> None:
    path = terminal.surgery_file()
    path.write_text(path.read_text().replace(old, new))


def test_describe_marks_the_faulty_line_and_shows_live_values(tmp_path: Path) -> None:
    terminal = crashed(tmp_path)
    shown = terminal.command("describe")
    line = line_of("accumulate.py", FAULTY)
    assert f">> {line}          {FAULTY}" in shown
    assert f"   {line - 1}      for item in data:" in shown
    assert "└ '3'" in shown and "TypeError: unsupported operand type(s) for +: 'int' and 'str'" in shown
    terminal.command("skip")
    terminal.leave("q")


def test_describe_without_better_exceptions_shows_pythons_traceback_and_says_why(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"  # a machine without the `daifu[console]` extra
    hidden.mkdir()
    (hidden / "better_exceptions.py").write_text("raise ImportError('not installed', name='better_exceptions')\n")
    terminal = crashed(tmp_path, PYTHONPATH=os.pathsep.join([str(hidden), os.environ.get("PYTHONPATH", "")]))
    shown = terminal.command("describe")
    assert f">> {line_of('accumulate.py', FAULTY)}" in shown and "Traceback (most recent call last)" in shown
    assert "(values not shown: better_exceptions is not installed; pip install 'daifu[console]')" in shown
    terminal.command("skip")
    assert "FINAL total=7" in terminal.leave("q")


def test_pdb_commands_see_the_live_frame(tmp_path: Path) -> None:
    terminal = crashed(tmp_path)
    assert "(3, '3', [1, 2])" in terminal.command("p total, item, seen")
    assert f"accumulate.py({line_of('accumulate.py', FAULTY)})main()" in terminal.command("w")
    terminal.command("skip")
    assert "FINAL total=7 seen=[1, 2, '3', 4]" in terminal.leave("q")


def test_surgery_resumes_at_the_faulty_statement_with_the_state_kept(tmp_path: Path) -> None:
    terminal = crashed(tmp_path)
    paths = terminal.command("focus")
    assert str(terminal.surgery_file()) in paths and str(terminal.action_file()) in paths
    assert terminal.action_file().read_text() == ""
    fix_surgery_file(terminal, *FIXED_SOURCE)
    shown = terminal.command("surgery")
    assert f"-        {FAULTY}" in shown and "+        total = total + int(item)" in shown
    assert "Surgery accepted" in shown
    out = terminal.leave("q")
    where = f"{program('accumulate.py')}:{line_of('accumulate.py', FAULTY)}"
    assert f"Leaving the console with Surgery: the new main resumes at {where}: total = total + int(item)." in out
    assert "FINAL total=10 seen=[1, 2, '3', 4] trace=None" in out
    assert terminal.status == 0
    record = [json.loads(line) for line in (terminal.workspace / "repairs.jsonl").read_text().splitlines()]
    assert [(r["decision"], r["decided_by"], r["suggested_by"], r["decided_at"]) for r in record] == [
        ("Surgery", "person", "person", "console")]


def test_action_runs_in_the_faulty_frame_then_retries(tmp_path: Path) -> None:
    terminal = crashed(tmp_path)
    terminal.command("focus")
    terminal.action_file().write_text("item = int(item)\n")
    assert "Action accepted" in terminal.command("action")
    out = terminal.leave("q")
    where = f"{program('accumulate.py')}:{line_of('accumulate.py', FAULTY)}"
    assert f"the action runs in the faulty frame, then the run resumes at {where}: {FAULTY} (run again)." in out
    assert "FINAL total=10 seen=[1, 2, 3, 4] trace=None" in out


def test_a_failing_action_brings_the_console_back_with_the_reason(tmp_path: Path) -> None:
    terminal = crashed(tmp_path)
    terminal.command("focus")
    terminal.action_file().write_text("item = undefined_name\n")
    terminal.command("action")
    again = terminal.leave_to_prompt("q")
    assert "Tried Action(" in again and "the action raised NameError" in again
    terminal.command("focus")
    assert terminal.action_file().read_text() == "item = undefined_name\n"  # the edits are kept
    terminal.action_file().write_text("item = int(item)\n")
    terminal.command("action")
    assert "FINAL total=10 seen=[1, 2, 3, 4]" in terminal.leave("q")


def test_skip_goes_on_after_the_faulty_statement(tmp_path: Path) -> None:
    terminal = crashed(tmp_path)
    assert "Skip: it takes effect" in terminal.command("skip")
    assert "FINAL total=7 seen=[1, 2, '3', 4] trace=None" in terminal.leave("continue")


def test_pass_runs_the_statement_again_as_the_prototype_did(tmp_path: Path) -> None:
    terminal = crashed(tmp_path, "flaky.py")
    assert "Pass: it takes effect" in terminal.command("pass")
    assert "FINAL got=[0, 10, 20] calls=4" in terminal.leave("q")
    plays = [line.rsplit(" - ", 1)[1] for line in (tmp_path / "experiment_record.log").read_text().splitlines()]
    assert "Repairing... Pass" in plays


def test_retry_runs_the_statement_again(tmp_path: Path) -> None:
    terminal = crashed(tmp_path, "flaky.py")
    assert "Retry" in terminal.command("retry")
    assert "FINAL got=[0, 10, 20] calls=4" in terminal.leave("q")


def test_exit_ends_the_program(tmp_path: Path) -> None:
    terminal = crashed(tmp_path)
    out = terminal.leave("exit")
    assert "Deliberately Exit This Program." in out and "FINAL" not in out
    assert terminal.status == 1


def test_leaving_without_a_decision_raises_the_original_exception(tmp_path: Path) -> None:
    terminal = crashed(tmp_path)
    out = terminal.leave("q")
    assert "No decision taken" in out and "TypeError: unsupported operand" in out
    assert terminal.status == 1


def test_edit_opens_the_surgery_file_in_the_editor(tmp_path: Path) -> None:
    terminal = crashed(tmp_path, EDITOR="sed -i s/total\\ +\\ item/total\\ +\\ int(item)/")
    terminal.command("focus")
    terminal.command("edit")
    assert "total = total + int(item)" in terminal.surgery_file().read_text()
    assert "Surgery accepted" in terminal.command("surgery")
    assert "FINAL total=10" in terminal.leave("q")


def test_refused_surgery_shows_why_and_changes_nothing(tmp_path: Path) -> None:
    terminal = crashed(tmp_path)
    terminal.command("focus")
    original = terminal.surgery_file().read_text()
    terminal.surgery_file().write_text(original.replace("def main():", "def main(extra):"))
    assert "Surgery refused:" in terminal.command("surgery")
    terminal.surgery_file().write_text(original.replace(FAULTY, "total = total +"))
    refused = terminal.command("surgery")
    assert "Surgery refused: the new source does not compile: line" in refused
    assert "(3, '3')" in terminal.command("p total, item")
    terminal.surgery_file().write_text(original.replace(*FIXED_SOURCE))
    assert "Surgery accepted" in terminal.command("surgery")
    assert "FINAL total=10" in terminal.leave("q")


def test_surgery_and_action_before_focus_say_so(tmp_path: Path) -> None:
    terminal = crashed(tmp_path)
    assert "type `focus` first. Nothing changed." in terminal.command("surgery")
    assert "type `focus` first. Nothing changed." in terminal.command("action")
    assert not terminal.workspace.exists() or not list(terminal.workspace.glob("(surgery-*"))
    assert "No decision taken" in terminal.leave("q")


def test_help_lists_every_daifu_command(tmp_path: Path) -> None:
    terminal = crashed(tmp_path)
    listing = terminal.command("help")
    for name in COMMANDS:
        assert f"\n  {name:<10} " in listing
    assert "focus\n" in terminal.command("help focus")
    terminal.command("skip")
    terminal.leave("q")


def test_stepping_is_refused_and_the_session_goes_on(tmp_path: Path) -> None:
    terminal = crashed(tmp_path)
    assert "Stepping is not available" in terminal.command("next")
    terminal.command("skip")
    assert "FINAL total=7" in terminal.leave("q")


def test_ctrl_c_at_the_prompt_keeps_the_session(tmp_path: Path) -> None:
    terminal = crashed(tmp_path)
    terminal.wait_reading()
    terminal.child.sendintr()
    terminal.child.expect_exact("--KeyboardInterrupt--")
    terminal.wait_prompt()
    terminal.command("skip")
    assert "FINAL total=7" in terminal.leave("q")


def test_broadcast_is_applied_by_the_next_process_without_asking(tmp_path: Path) -> None:
    terminal = crashed(tmp_path)
    terminal.command("skip")
    assert "Broadcast saved to" in terminal.command("broadcast")
    terminal.leave("q")
    saved = json.loads((terminal.workspace / "1.broadcast").read_text())
    assert saved["plays"] == [{"play": "Skip", "code": None}] and saved["exception_type"] == "TypeError"
    again = spawn(tmp_path, [program("accumulate.py")])
    out = again.finish()
    assert "applying Skip from the broadcast" in out and "FINAL total=7" in out and "(DaiFu)" not in out


def test_report_shows_the_crash_report(tmp_path: Path) -> None:
    pytest.importorskip("daifu.report")
    terminal = crashed(tmp_path)
    shown = terminal.command("report")
    assert "Crash report" in shown and "total = total + item" in shown
    terminal.command("skip")
    terminal.leave("q")


def test_diff_is_coloured_on_a_terminal_without_no_color(tmp_path: Path) -> None:
    terminal = crashed(tmp_path, colour=True)
    terminal.command("focus")
    fix_surgery_file(terminal, *FIXED_SOURCE)
    assert "\x1b[32m+        total = total + int(item)\x1b[0m" in terminal.command("surgery")
    assert "FINAL total=10" in terminal.leave("q")


def test_a_dumb_terminal_gets_no_colours(tmp_path: Path) -> None:
    terminal = crashed(tmp_path, TERM="dumb")  # a terminal, NO_COLOR unset, but TERM says it has no colours
    terminal.command("focus")
    fix_surgery_file(terminal, *FIXED_SOURCE)
    shown = terminal.command("surgery")
    assert "+        total = total + int(item)" in shown and "\x1b[" not in shown
    assert "FINAL total=10" in terminal.leave("q")


@pytest.mark.torch
def test_describe_shows_tensors_by_shape_dtype_and_device(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    terminal = crashed(tmp_path, "tensors.py")
    shown = terminal.command("describe")
    assert "tensor(shape=[2, 3], dtype=float32, device=cpu)" in shown
    assert "tensor(shape=[4, 5], dtype=float32, device=cpu)" in shown
    terminal.leave("exit")


def test_trial_tries_a_repair_on_a_copy_and_changes_nothing(tmp_path: Path) -> None:
    terminal = crashed(tmp_path)
    terminal.command("focus")
    fix_surgery_file(terminal, *FIXED_SOURCE)
    shown = terminal.command("trial surgery")
    assert "trial: " in shown and "state kept" in shown, shown
    assert "raised TypeError" in terminal.command("trial retry")
    assert "(3, '3', [1, 2])" in terminal.command("p total, item, seen")  # the live frame is as it was
    terminal.command("skip")
    assert "FINAL total=7 seen=[1, 2, '3', 4]" in terminal.leave("q")


PATCHED = "sed -i 's/item [*] self.factor + 0/int(item) * self.factor/'"
"""An editor that fixes `Scaler.apply` of `called.py`."""


def test_iteration_skips_the_rest_of_the_iteration_after_trying_it(tmp_path: Path) -> None:
    terminal = crashed(tmp_path, "called.py")
    shown = terminal.command("iteration")
    assert "Trying SkipIteration on a copy of the run..." in shown and "\ntrial: iteration finished in" in shown
    assert "SkipIteration: it takes effect when you leave" in shown
    assert "FINAL total=14 seen=[1, 2, 4]" in terminal.leave("q")
    record = [json.loads(line) for line in (terminal.workspace / "repairs.jsonl").read_text().splitlines()]
    assert [r["decision"] for r in record] == ["SkipIteration"]


def test_skip_iteration_is_the_iteration_command_and_skip_takes_no_other_argument(tmp_path: Path) -> None:
    terminal = crashed(tmp_path, "called.py")
    assert "`skip` takes no argument but `iteration`" in terminal.command("skip everything")
    assert "SkipIteration: it takes effect" in terminal.command("skip iteration")
    assert "FINAL total=14 seen=[1, 2, 4]" in terminal.leave("q")


def test_iteration_outside_a_loop_is_refused_with_the_reason(tmp_path: Path) -> None:
    terminal = crashed(tmp_path, "once.py")
    refused = terminal.command("iteration")
    assert "Skip the iteration refused: the faulty statement is in no loop of the function" in refused
    out = terminal.leave("q")
    assert "No decision taken" in out and "ValueError: invalid literal" in out


def test_patch_opens_the_called_method_in_the_editor_tries_and_takes_it(tmp_path: Path) -> None:
    terminal = crashed(tmp_path, "called.py", EDITOR=PATCHED)
    shown = terminal.command("patch scaler.apply")
    path = terminal.workspace / "(patch-1)Scaler.apply.py"
    assert path.read_text() == "def apply(self, item):\n    return int(item) * self.factor\n"
    assert "-    return item * self.factor + 0" in shown and "+    return int(item) * self.factor" in shown
    assert "Trying Patch on a copy of the run..." in shown and "\ntrial: iteration finished in" in shown
    assert "Patch of __main__:Scaler.apply accepted: it takes effect when you leave" in shown
    assert "(3, '3')" in terminal.command("p scaler.apply(1) + 1, item")  # nothing applied before `q`
    out = terminal.leave("q")
    assert "FINAL total=20 seen=[1, 2, '3', 4]" in out
    record = [json.loads(line) for line in (terminal.workspace / "repairs.jsonl").read_text().splitlines()]
    assert [(r["decision"], r["target"]) for r in record] == [("Patch", "__main__:Scaler.apply")]


def test_a_patch_whose_trial_fails_is_refused_unless_forced(tmp_path: Path) -> None:
    terminal = crashed(tmp_path, "called.py", EDITOR="sed -i 's/+ 0/+ None/'")
    refused = terminal.command("patch scaler.apply")
    assert "\ntrial: raised TypeError" in refused
    assert "Patch refused: its trial did not pass; `patch --force scaler.apply` takes it anyway." in refused
    out = terminal.leave("q")
    assert "No decision taken: the exception is raised." in out and "TypeError: can only concatenate str" in out
    assert terminal.status == 1


def test_patch_without_an_editor_says_where_the_source_is_and_patch_again_takes_it(tmp_path: Path) -> None:
    terminal = crashed(tmp_path, "called.py")
    shown = terminal.command("patch scaler.apply")
    path = terminal.workspace / "(patch-1)Scaler.apply.py"
    assert f"edit {path} in another window, then type `patch` again" in shown
    assert "No decision taken" not in shown and "accepted" not in shown
    path.write_text(path.read_text().replace("item * self.factor + 0", "int(item) * self.factor"))
    assert "Patch of __main__:Scaler.apply accepted" in terminal.command("patch")
    assert "FINAL total=20 seen=[1, 2, '3', 4]" in terminal.leave("q")


def test_patch_names_a_called_function_or_says_why_not(tmp_path: Path) -> None:
    terminal = crashed(tmp_path, "called.py")
    assert "Patch refused: `nothing` is not defined here" in terminal.command("patch nothing")
    assert "Patch refused: `total` is not a Python function" in terminal.command("patch total")
    assert "Usage: patch [--force] [name.of.function]" in terminal.command("patch scaler.apply(1)")
    assert "Usage: patch [--force] [name.of.function]" in terminal.command("patch")  # no patch begun yet
    terminal.leave("exit")


def test_an_action_defining_a_function_is_summarised_by_its_def(tmp_path: Path) -> None:
    terminal = crashed(tmp_path, "called.py")
    terminal.command("focus")
    terminal.action_file().write_text(
        "def apply(self, item):\n    value = int(item)\n    return value * self.factor\n\nScaler.apply = apply\n")
    terminal.command("action")
    out = terminal.leave("q")
    assert "Action `def apply(self, item); Scaler.apply = apply`" in out, out
    assert "FINAL total=20 seen=[1, 2, '3', 4]" in out
