"""The `(DaiFu)` console: pdb in the faulty frame, plus the commands that repair the crash.

The console only asks and shows: each repair command validates what the user wrote (through the
verification stage, `daifu.decide.verify`) and sets the pending decision; nothing is applied until
the user leaves with `q`/`continue`, and the runtime carries the decision out (`daifu.core.resume`).
The console never turns tracing on — it is opened with `setup()` and `cmdloop()`, not `set_trace()` —
so the program runs at full speed once it is left, and pdb's stepping commands say they are
unavailable instead of half-working. The commands that take a decision as it is (`pass`, `retry`,
`skip`) are those of the decisions' table (`daifu.core.kinds.commands`).
"""

from __future__ import annotations

import pdb
import re
from pathlib import Path
from types import FunctionType

from collections.abc import Callable

from daifu import repair
from daifu.console import callee, editor
from daifu.console.colour import paint, wanted
from daifu.console.diffs import source_diff
from daifu.console.resuming import resume_point
from daifu.core import kinds
from daifu.core.crash import Crash
from daifu.core.decisions import Action, Decision, Patch, SkipIteration, Surgery
from daifu.core.patch import PatchRefused
from daifu.core.trial import Outcome, Verdict
from daifu.core.handling import RepairContext
from daifu.decide import broadcast
from daifu.decide.verify import Verification
from daifu.state import RUN
from daifu.store import record, workspace

COMMANDS = ("describe", "focus", "edit", "surgery", "action", "patch", *kinds.commands(), "iteration", "trial", "ask",
            "broadcast", "report", "exit", "continue")
"""DaiFu's own commands, in the order `help` lists them."""
_PATCH_NAME = re.compile(r"[A-Za-z_][\w.]*(:[A-Za-z_][\w.]*)?")
"""What `patch` takes: a dotted name (`model.forward`), or `module:qualname`."""


def open_console(crash: Crash, context: RepairContext) -> Decision | None:
    """The console on `crash`, one process at a time (`daifu.repair.repair_lock`)."""
    number = record.current_number()  # read before the console, where the user may run code that crashes
    with repair.repair_lock:
        return Console(crash, context, number).session()


class Console(pdb.Pdb):
    """pdb on the live faulty frame, without tracing, with DaiFu's repair commands.

    crash: what is being repaired; context: what the console adds to it (the locals a person rebinds);
    number: its repair number N, which names the workspace files.
    decision: the pending decision, returned when the console is left (`None`: raise).
    broadcast_of: the decision last saved by `broadcast`; rewritten on leaving if it changed.
    """

    def __init__(self, crash: Crash, context: RepairContext, number: int) -> None:
        super().__init__(nosigint=True, readrc=False)  # no .pdbrc: a `continue` there would leave at once
        self.prompt = "(DaiFu) "
        self.crash = crash
        self.context = context
        self.stage = Verification(crash, context.settings)
        self.number = number
        self.decision: Decision | None = None
        self.broadcast_of: Decision | None = None
        self.patching: str | None = None  # the function `patch` was last given
        self.colour = wanted(self.stdout)

    # -- session ----------------------------------------------------------------------------

    def session(self) -> Decision | None:
        """Show the crash, take commands until the user leaves, return the decision taken."""
        if self.crash.frame is None:
            self.error("The faulty frame is gone; nothing to inspect. The exception is raised.")
            return None
        self.reset()
        from daifu.console import describe  # better_exceptions is loaded only when a console opens

        self.setup(self.crash.frame, describe.from_faulty_frame(self.crash))
        self._select_faulty_frame()
        self.message(self._intro())
        try:
            self._cmdloop()
        finally:
            self.forget()
        if self.broadcast_of is not None and self.decision is not None and self.decision != self.broadcast_of:
            self._broadcast(self.decision)
        return self.decision

    def _select_faulty_frame(self) -> None:
        """Make the vaccinated frame current, at the faulty line.

        pdb would start at the deepest frame of the traceback (often library code), and give the
        faulty frame its `f_lineno`, which is where DaiFu's catcher runs rather than the user's line.
        """
        for index, (frame, _) in enumerate(self.stack):
            if frame is self.crash.frame:
                self.stack[index] = (frame, self.crash.lineno)
                self.curindex, self.curframe = index, frame
                self.curframe_locals = frame.f_locals
                self.context.edited_locals = self.curframe_locals  # `!x = 1` rebinds are resumed with
                self.lineno = max(0, self.crash.lineno - 6)  # so that `list` centres on the faulty line

    def _intro(self) -> str:
        crash = self.crash
        lines = [
            paint(f"DaiFu caught {crash.exception_type}: {crash.exception}", "bold", self.colour),
            f"  in {crash.qualname}, {crash.filename}, line {crash.lineno}:",
            *(f"    {line}" for line in crash.statement.splitlines()),
        ]
        if crash.attempt > 1:
            lines.append(f"  The same crash again here (attempt {crash.attempt}).")
        lines += [f"  Tried {_shortened(what)} -> {why}" for what, why in crash.tried]
        lines.append(f"Repair {self.number}. Type `describe` for details, `help` for the commands, `q` to leave.")
        return "\n".join(lines)

    def onecmd(self, line: str) -> bool:
        """Run one command; an error inside a command is shown, and the session goes on."""
        try:
            return bool(super().onecmd(line))
        except Exception as error:  # a failing command must never end the session (nor the program)
            self.error(f"{line.split()[0] if line.split() else line!r} failed: {type(error).__name__}: {error}")
            return False

    # -- looking -----------------------------------------------------------------------------

    def do_describe(self, arg: str) -> None:
        """describe
        Show the function's source with the faulty line marked `>>`, then the traceback with values.
        The source is the one running (after a surgery, the new one), numbered as in your file."""
        from daifu.console import describe

        self.message(describe.describe(self.crash, self.colour))

    def do_report(self, arg: str) -> None:
        """report
        Show the crash report exactly as it would be sent to the repair bot (secrets redacted)."""
        try:  # the report is the repair bot's business; the console works without it
            from daifu.report.build import build_report, render_report_text
        except ImportError as missing:
            self.error(f"The crash report is not available in this installation: {missing}")
            return
        self.message(render_report_text(build_report(self.crash)))

    # -- preparing a repair ------------------------------------------------------------------

    def do_focus(self, arg: str) -> None:
        """focus
        Write (surgery-N)<func>.py, a copy of the source to edit, and an empty (action-N)<func>.py.
        N is this repair's number. Focusing again for the same repair keeps your edits."""
        if not self._focused:
            try:
                workspace.write(self._surgery_path, self.crash.source)
                workspace.write(self._action_path, "")
            except OSError as error:
                self.error(f"Cannot write the workspace files: {error}")
                return
            RUN.focused.add(self._surgery_path)
        self.message(
            f"Edit the function's source in:\n  {self._surgery_path}\n"
            f"Write code to run in the faulty frame in:\n  {self._action_path}\n"
            "Then type `surgery` or `action` (`edit` opens the source in $VISUAL/$EDITOR)."
        )

    def do_edit(self, arg: str) -> None:
        """edit [surgery|action]
        Open the surgery file (or the action file) of `focus` in $VISUAL or $EDITOR."""
        which = arg.strip() or "surgery"
        if which not in ("surgery", "action"):
            self.error("Usage: edit [surgery|action]")
            return
        if self._not_focused(which):
            return
        problem = editor.edit(self._surgery_path if which == "surgery" else self._action_path)
        if problem is not None:
            self.message(problem)

    # -- deciding ----------------------------------------------------------------------------

    def do_surgery(self, arg: str) -> None:
        """surgery
        Validate the edited surgery file, show the diff, and take it as the decision.
        When you leave with `q`, the new function resumes at the faulty statement. A refused
        surgery shows the reason and changes nothing."""
        source = self._read_focus_file("surgery", self._surgery_path)
        if source is None:
            return
        if source == self.crash.source:
            self.error(f"{self._surgery_path.name} is unchanged: edit it first. Nothing changed.")
            return
        decision = Surgery(source)
        reasons = self.stage.problems(decision)
        if reasons:
            self.error(f"Surgery refused: {'; '.join(reasons)}. Nothing changed; fix the file and type `surgery` "
                       "again.")
            return
        self.message(
            source_diff(
                self.crash.source, source, self.crash.first_lineno, self.crash.function_name, self.colour
            ).rstrip("\n")
        )
        self._take(decision, "Surgery accepted")

    def do_action(self, arg: str) -> None:
        """action
        Take the action file's code as the decision: it runs in the faulty frame, then a retry.
        When you leave with `q`, the code runs in the faulty frame's context (it may rebind locals
        and globals), then the faulty statement runs again."""
        code = self._read_focus_file("action", self._action_path)
        if code is None:
            return
        if not code.strip():
            self.error(f"{self._action_path.name} is empty: write the code to run first. Nothing changed.")
            return
        decision = Action(code)
        reasons = self.stage.problems(decision)
        if reasons:
            self.error(f"Action refused: {'; '.join(reasons)}. Nothing changed; fix the file and type `action` "
                       "again.")
            return
        self.message("\n".join(f"    {line}" for line in code.rstrip("\n").splitlines()))
        self._take(decision, "Action accepted")

    def do_trial(self, arg: str) -> None:
        """trial [surgery|action|pass|retry|skip|iteration]
        Try a repair on a sandboxed copy of the run without applying it, and say how it went.
        Without an argument: the decision taken so far, else the surgery file of `focus`. The copy
        runs to the end of the interrupted iteration; it writes no file and starts no process."""
        decision = self._trial_subject(arg.strip())
        if decision is None:
            return
        self._try(decision)

    def do_iteration(self, arg: str) -> None:
        """iteration (or: skip iteration)
        Skip the rest of the iteration: the innermost loop goes on with its next one when you leave
        with `q`. It is tried on a copy of the run first, and its verdict shown."""
        decision = SkipIteration()
        reasons = self.stage.problems(decision)
        if reasons:
            self.error(f"Skip the iteration refused: {'; '.join(reasons)}. Nothing changed.")
            return
        self._try(decision)
        self._take(decision, kinds.play_name(decision))

    def do_patch(self, arg: str) -> None:
        """patch [--force] [name.of.function]
        Patch a function the faulty statement called (`patch model.forward`): edit its source, then
        it is checked, tried on a copy of the run and, if its trial passes (or with --force), taken.
        Its source is written to (patch-N)<qualname>.py and opened in $VISUAL/$EDITOR; without an
        editor, edit the file yourself and type `patch` again. When you leave with `q`, the
        function's code is replaced in place and the faulty statement runs again."""
        words = arg.split()
        force = "--force" in words
        names = [word for word in words if word != "--force"]
        name = names[0] if len(names) == 1 else (self.patching if not names else None)
        if name is None or not _PATCH_NAME.fullmatch(name):
            self.error("Usage: patch [--force] [name.of.function] (a function or method the faulty statement "
                       "calls, e.g. `patch model.forward`). Nothing changed.")
            return
        try:
            function, target = callee.find(name, self.curframe_locals, self.crash.frame)
            source = callee.source(function)
        except PatchRefused as refused:
            self.error(f"Patch refused: {refused}. Nothing changed.")
            return
        self.patching = name
        path = workspace.patch_file(self.number, function.__qualname__).absolute()
        if path not in RUN.focused:
            try:
                workspace.write(path, source)
            except OSError as error:
                self.error(f"Cannot write {path}: {error}. Nothing changed.")
                return
            RUN.focused.add(path)
        if editor.editor_command() is not None:
            problem = editor.edit(path)
            if problem is not None:
                self.message(problem)
        new = self._read(path)
        if new is None:
            return
        if new == source:
            if editor.editor_command() is None:
                self.message(f"The source of {function.__qualname__}: edit {path} in another window, "
                             "then type `patch` again.")
            else:
                self.error(f"{path.name} is unchanged: nothing to patch. Nothing changed.")
            return
        self._patch(Patch(target, new), name, source, function, force)

    def _patch(self, decision: Patch, name: str, old: str, function: FunctionType, force: bool) -> None:
        """Check, show, try and take a patch (refused when its trial fails, unless forced)."""
        reasons = self.stage.problems(decision)
        if reasons:
            self.error(f"Patch refused: {'; '.join(reasons)}. Nothing changed; fix the file and type `patch` again.")
            return
        first = function.__code__.co_firstlineno
        self.message(source_diff(old, decision.source, first, function.__name__, self.colour).rstrip("\n"))
        verdict = self._try(decision)
        if verdict.outcome is not Outcome.UNAVAILABLE and not verdict.passed and not force:
            self.error(f"Patch refused: its trial did not pass; `patch --force {name}` takes it anyway. "
                       "Nothing changed.")
            return
        self._take(decision, f"Patch of {decision.target} accepted")

    def _try(self, decision: Decision) -> Verdict:
        """`decision` tried on a copy of the run, its verdict said in one line (green when it passed)."""
        self.message(f"Trying {kinds.play_name(decision)} on a copy of the run...")
        verdict = self.stage.trial(decision)  # the verification stage's trial, as automatic mode runs it
        self.message(paint(verdict.describe(), "green" if verdict.passed else "red", self.colour))
        if verdict.output.strip():
            self.message("What the copy printed:\n" + "\n".join(f"  {line}" for line in verdict.output.splitlines()[-10:]))
        return verdict

    def _trial_subject(self, which: str) -> Decision | None:
        if which in kinds.words(carrying_code=False):
            return kinds.from_word(which)
        if which in ("surgery", "action"):
            code = self._read_focus_file(which, self._surgery_path if which == "surgery" else self._action_path)
            return None if code is None else (Surgery(code) if which == "surgery" else Action(code))
        if which:
            self.error(f"Usage: trial [{'|'.join(('surgery', 'action', *kinds.words(carrying_code=False)))}]")
            return None
        if self.decision is not None:
            return self.decision
        code = self._read_focus_file("surgery", self._surgery_path)
        return None if code is None else Surgery(code)

    def do_ask(self, arg: str) -> None:
        """ask [question]
        Ask the repair bot about this crash (and your question); choose among its suggestions.
        The crash report (redacted, as `report` shows it) and your question go to the configured
        repair bot (DAIFU_REPAIRBOT_URL), else to the embedded rules engine, which answers no
        free-form questions. Its answer and root cause are shown, then each suggestion with the
        verdict of a trial on a copy of the run, in the approval prompt: the one you apply becomes
        the decision taken when you leave with `q`. Asking again continues the conversation."""
        try:  # the bot is an addition; the console works without it
            from daifu.console import ask
        except ImportError as missing:
            self.error(f"Asking the repair bot is not available in this installation: {missing}")
            return
        decision = ask.ask(self.crash, self.context, self.number, arg, self.message)
        if decision is None:
            self.message("No suggestion chosen: the pending decision is unchanged.")
        else:
            self._take(decision, f"Chosen from the repair bot's suggestions: {kinds.play_name(decision)}")

    def do_broadcast(self, arg: str) -> None:
        """broadcast
        Save this repair as N.broadcast, for every process that hits the same crash to apply.
        A process that meets the same function, line and exception type takes the same decision
        without asking. Saved as JSON: reading it never runs code."""
        if self.decision is None:
            self.error("Nothing to broadcast yet: take a decision first (surgery, action, pass, retry or skip).")
            return
        path = self._broadcast(self.decision)
        if path is not None:
            self.message(f"Broadcast saved to {path}.")

    # -- leaving -----------------------------------------------------------------------------

    def do_continue(self, arg: str) -> bool:
        """c(ont(inue)) | q(uit)
        Leave the console; the program goes on with the decision taken (none: raise)."""
        if self.decision is None:
            self.message("No decision taken: the exception is raised.")
        else:
            where = resume_point(self.crash, self.decision)
            self.message(f"Leaving the console with {kinds.play_name(self.decision)}: {where}.")
        return True

    do_c = do_cont = do_q = do_quit = do_continue

    def do_EOF(self, arg: str) -> bool:
        """EOF (Ctrl-D)
        Leave the console, as `q` does."""
        self.message("")
        return self.do_continue(arg)

    def do_exit(self, arg: str) -> None:
        """exit
        End the program now (SystemExit); the crash is not repaired."""
        self.message("Deliberately Exit This Program.")
        record.note(f"Repair {self.number}: Deliberately Exit This Program.")
        raise SystemExit(1)

    def _no_stepping(self, arg: str) -> None:
        """(not available in the DaiFu console)
        Stepping needs tracing, which the DaiFu console never turns on. Use `retry`, `skip`,
        `action` or `surgery`, then `q`."""
        self.error("Stepping is not available in the DaiFu console: use retry, skip, action or surgery, then q.")

    do_step = do_s = do_next = do_n = do_until = do_unt = do_return = do_r = _no_stepping
    do_jump = do_j = do_run = do_restart = _no_stepping

    def do_help(self, arg: str) -> None:
        """h(elp) [command]
        Without a command, list DaiFu's commands, then pdb's; with one, show its help."""
        if arg.strip():
            super().do_help(arg)
            return
        self.message("DaiFu commands (`help <command>` for more):")
        for name in COMMANDS:
            doc = getattr(self, f"do_{name}").__doc__
            summary = doc.splitlines()[1].strip() if doc else "(no help: docstrings removed by -OO)"
            self.message(f"  {name:<10} {summary}")
        self.message(
            "pdb's commands work on the faulty frame, with the live values: p, pp, l, ll, w, up, down, "
            "interact, !statement."
        )
        super().do_help(arg)

    do_h = do_help

    # -- helpers -----------------------------------------------------------------------------

    @property
    def _surgery_path(self) -> Path:
        return workspace.surgery_file(self.number, self.crash.function_name).absolute()

    @property
    def _action_path(self) -> Path:
        return workspace.action_file(self.number, self.crash.function_name).absolute()

    @property
    def _focused(self) -> bool:
        return self._surgery_path in RUN.focused

    def _not_focused(self, what: str) -> bool:
        if not self._focused:
            self.error(f"No {what} file yet: type `focus` first. Nothing changed.")
        return not self._focused

    def _read_focus_file(self, what: str, path: Path) -> str | None:
        if self._not_focused(what):
            return None
        return self._read(path)

    def _read(self, path: Path) -> str | None:
        try:
            return path.read_text(encoding="utf-8")
        except OSError as error:
            self.error(f"Cannot read {path}: {error}. Nothing changed.")
            return None

    def _take(self, decision: Decision, what: str) -> None:
        earlier = self.decision
        self.decision = decision
        replaced = ""
        if earlier is not None and earlier != decision:
            replaced = f" (instead of {kinds.play_name(earlier)})"
        self.message(f"{what}{replaced}: it takes effect when you leave with `q` or `continue`.")

    def _broadcast(self, decision: Decision) -> Path | None:
        try:
            path = broadcast.save(self.crash, self.number, [decision])
        except OSError as error:
            self.error(f"Cannot write the broadcast file: {error}")
            return None
        self.broadcast_of = decision
        return path


def _taking(word: str, help_text: str) -> Callable[[Console, str], None]:
    """The console command `word`, which takes the decision of that word as it is (`kinds.commands`)."""

    def command(self: Console, arg: str) -> None:
        if arg.strip():
            if word == "skip" and arg.strip() == "iteration":
                self.do_iteration("")
            else:
                but = " but `iteration`" if word == "skip" else ""
                self.error(f"`{word}` takes no argument{but}. Nothing changed.")
            return
        decision = kinds.from_word(word)
        self._take(decision, kinds.play_name(decision))

    command.__doc__ = f"{word}\n        {help_text}"
    return command


for _word, _help in kinds.commands().items():
    setattr(Console, f"do_{_word}", _taking(_word, _help))


def _shortened(text: str, limit: int = 60) -> str:
    """A tried decision on one line: a surgery's repr holds the whole source."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
