"""The approval prompt: a person accepts, edits or rejects the repair bot's suggestions.

The bot proposes, a person decides: nothing it suggests runs before the person has seen it — a
surgery as a diff against the running source, an action as its code — and the runtime's dry run
(`crash.check`) has said whether it can be applied. The prompt only returns a decision; the
runtime carries it out.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, cast
from collections.abc import Sequence

from daifu import repair
from daifu.console import editor
from daifu.store import record
from daifu.store import workspace
from daifu.console.colour import paint, wanted
from daifu.core.crash import Crash
from daifu.core.decisions import Decision, Skip
from daifu.console.diffs import source_diff
from daifu.console.resuming import resume_point
from daifu.decide.automatic import to_decision

if TYPE_CHECKING:
    from repairbot.protocol import Suggestion as BotSuggestion

CHOICES = "[a]pply / [r]eject / [e]dit / [n]ext / [s]kip / [q]uit to console"


class Suggestion(Protocol):
    """What the prompt needs of a suggestion (`repairbot.protocol.Suggestion` has it).

    kind: surgery, action, patch_function, retry or skip; code: the new `def` (surgery,
    patch_function) or the statements to run (action); a patch_function may also have a `target`,
    the expression that reaches the callee from the faulty frame.
    """

    @property
    def kind(self) -> str: ...
    @property
    def code(self) -> str: ...
    @property
    def explanation(self) -> str: ...
    @property
    def confidence(self) -> float: ...


@dataclass(frozen=True)
class Edited:
    """A suggestion after the person edited its code."""

    kind: str
    code: str
    explanation: str
    confidence: float
    target: str | None = None


def approval_prompt(crash: Crash, diagnosis: str, suggestions: Sequence[Suggestion]) -> Decision | None:
    """Ask the person at the terminal what to do with the bot's `suggestions` for `crash`.

    Returns the decision taken; `None` (raise) when every suggestion was rejected or input ended.
    `q` opens the `(DaiFu)` console, whose decision is returned.
    """
    with repair.repair_lock:
        choice = _Prompt(crash, list(suggestions)).run(diagnosis)
    if not isinstance(choice, _ToConsole):
        return choice
    from daifu.console import session as console  # imported when asked: pdb is not needed otherwise

    return console.open_console(crash)  # after the lock is released: a Manager lock is not re-entrant


class _ToConsole:
    """The person asked for the console (`q`)."""


_TO_CONSOLE = _ToConsole()


class _Prompt:
    """The suggestions still on offer and the one shown (`index`)."""

    def __init__(self, crash: Crash, suggestions: list[Suggestion]) -> None:
        self.crash = crash
        self.suggestions = suggestions
        self.index = 0
        self.colour = wanted(sys.stdout)

    def run(self, diagnosis: str) -> Decision | _ToConsole | None:
        print(paint("DaiFu repair bot — root cause:", "bold", self.colour))
        print("\n".join(f"  {line}" for line in diagnosis.splitlines()))
        while self.suggestions:
            self.show()
            answer = _ask(f"{CHOICES}? ")
            if answer is None:
                return None
            result = self.act(answer)
            if result is not None:
                return result
        return self.nothing_left()

    def show(self) -> None:
        suggestion = self.suggestions[self.index]
        print(
            f"\nSuggestion {self.index + 1}/{len(self.suggestions)} ({suggestion.kind}, "
            f"confidence {suggestion.confidence:.2f}): {suggestion.explanation}"
        )
        crash = self.crash
        if suggestion.kind == "surgery":
            print(
                source_diff(
                    crash.source, suggestion.code, crash.first_lineno, crash.function_name, self.colour
                ).rstrip()
            )
        elif suggestion.code:
            print("\n".join(f"    {line}" for line in suggestion.code.rstrip("\n").splitlines()))
        problem = self.problem(suggestion)
        print(f"Check: {'ok' if problem is None else 'would be refused: ' + problem}")
        verdict = getattr(suggestion, "verdict", None)  # tried on a copy of the run (automatic mode)
        if verdict is not None:
            mark = "green" if verdict.passed else "red"
            print(paint(verdict.describe()[0].upper() + verdict.describe()[1:], mark, self.colour))
        unsafe = getattr(suggestion, "unsafe", ())
        if unsafe:
            print(f"Not allowed unattended: {'; '.join(unsafe)}")

    def problem(self, suggestion: Suggestion) -> str | None:
        try:
            return self.crash.check(_decision(suggestion))
        except ValueError as error:
            return str(error)

    def act(self, answer: str) -> Decision | _ToConsole | None:
        """Carry out one answer; a decision (or the console) ends the prompt, `None` goes on."""
        suggestion = self.suggestions[self.index]
        if answer == "a":
            problem = self.problem(suggestion)
            if problem is None:
                decision = _decision(suggestion)
                where = resume_point(self.crash, decision)
                print(f"Applying suggestion {self.index + 1} ({suggestion.kind}): {where}.")
                return decision
            print(f"Not applied: {problem}")
        elif answer == "r":
            del self.suggestions[self.index]
            self.index = self.index % len(self.suggestions) if self.suggestions else 0
        elif answer == "n":
            self.index = (self.index + 1) % len(self.suggestions)
        elif answer == "e":
            self.edit(suggestion)
        elif answer == "s":
            print(f"Skipping the faulty statement: {resume_point(self.crash, Skip())}.")
            return Skip()
        elif answer == "q":
            return _TO_CONSOLE
        else:
            print(f"Answer with one letter: {CHOICES}.")
        return None

    def edit(self, suggestion: Suggestion) -> None:
        """Let the person change the code in their editor; the edited suggestion replaces it."""
        if suggestion.kind not in ("surgery", "action", "patch_function"):
            print(f"A {suggestion.kind} suggestion has no code to edit.")
            return
        number, name = record.current_number(), self.crash.function_name
        path = (
            workspace.surgery_file(number, name)
            if suggestion.kind == "surgery"
            else workspace.action_file(number, name)
        )
        try:
            workspace.write(path, suggestion.code)
            problem = editor.edit(path)
            if problem is not None:
                print(problem)
                if _ask("Press Enter when the file is saved. ") is None:
                    return
            code = path.read_text(encoding="utf-8")
        except OSError as error:
            print(f"Cannot edit {path}: {error}")
            return
        self.suggestions[self.index] = Edited(
            suggestion.kind,
            code,
            f"{suggestion.explanation} (edited)",
            suggestion.confidence,
            getattr(suggestion, "target", None),
        )

    def nothing_left(self) -> Decision | _ToConsole | None:
        print("\nNo suggestion left.")
        while True:
            answer = _ask("[s]kip / [q]uit to console / [x] raise? ")
            if answer in (None, "x"):
                return None
            if answer == "s":
                return Skip()
            if answer == "q":
                return _TO_CONSOLE


def _decision(suggestion: Suggestion) -> Decision:
    """The decision carrying out `suggestion`; `to_decision` reads only its kind, code and target."""
    return to_decision(cast("BotSuggestion", suggestion))


def _ask(prompt: str) -> str | None:
    """One answer, lower-cased; `None` at end of input. Ctrl-C asks again rather than ending the run."""
    while True:
        try:
            return input(prompt).strip().lower()[:1]
        except EOFError:
            return None
        except KeyboardInterrupt:
            print("--KeyboardInterrupt--")
