"""The prompt of the repair bot's suggestions: a person accepts, edits or rejects each.

The bot proposes, a person decides: nothing it suggests runs before the person has seen it — a
surgery as a diff against the running source, an action as its code — and the verification stage
(`daifu.decide.verify`) has said whether it can be applied. The prompt only returns a decision (or
that the person asked for the console); the runtime carries it out. `daifu.console.approval` opens
it for automatic mode, the console's `ask` through `choose`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from daifu.console import editor
from daifu.console.colour import paint, wanted
from daifu.console.diffs import source_diff
from daifu.console.resuming import resume_point
from daifu.core import kinds
from daifu.core.decisions import BadDecision, Decision, Skip
from daifu.decide.candidates import to_decision
from daifu.decide.reruns import describe as describe_reruns
from daifu.decide.verify import Verification
from daifu.store import record, workspace

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


def choose(stage: Verification, diagnosis: str, suggestions: Sequence[Suggestion]) -> Decision | None:
    """The prompt alone, for the console's `ask`: the console holds the lock, and `q` (or rejecting
    every suggestion) goes back to it with no decision (`None`)."""
    choice = Prompt(stage, list(suggestions)).run(diagnosis)
    return None if isinstance(choice, ToConsole) else choice


class ToConsole:
    """The person asked for the console (`q`)."""


TO_CONSOLE = ToConsole()


class Prompt:
    """The suggestions still on offer and the one shown (`index`)."""

    def __init__(self, stage: Verification, suggestions: list[Suggestion]) -> None:
        self.stage = stage
        self.crash = stage.crash
        self.suggestions = suggestions
        self.index = 0
        self.colour = wanted(sys.stdout)

    def run(self, diagnosis: str) -> Decision | ToConsole | None:
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
        again = getattr(suggestion, "reruns", ())  # a surgery that resumes above the crash
        if again:
            print(f"Runs again: {describe_reruns(again)}")
        unsafe = getattr(suggestion, "unsafe", ())
        if unsafe:
            print(f"Not allowed unattended: {'; '.join(unsafe)}")

    def problem(self, suggestion: Suggestion) -> str | None:
        try:
            problems = self.stage.problems(to_decision(suggestion))
        except BadDecision as error:
            return str(error)
        return "; ".join(problems) if problems else None

    def act(self, answer: str) -> Decision | ToConsole | None:
        """Carry out one answer; a decision (or the console) ends the prompt, `None` goes on."""
        suggestion = self.suggestions[self.index]
        if answer == "a":
            problem = self.problem(suggestion)
            if problem is None:
                decision = to_decision(suggestion)
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
            return TO_CONSOLE
        else:
            print(f"Answer with one letter: {CHOICES}.")
        return None

    def edit(self, suggestion: Suggestion) -> None:
        """Let the person change the code in their editor; the edited suggestion replaces it."""
        if suggestion.kind not in kinds.wire_kinds(carrying_code=True):
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

    def nothing_left(self) -> Decision | ToConsole | None:
        print("\nNo suggestion left.")
        while True:
            answer = _ask("[s]kip / [q]uit to console / [x] raise? ")
            if answer in (None, "x"):
                return None
            if answer == "s":
                return Skip()
            if answer == "q":
                return TO_CONSOLE


def _ask(prompt: str) -> str | None:
    """One answer, lower-cased; `None` at end of input. Ctrl-C asks again rather than ending the run."""
    while True:
        try:
            return input(prompt).strip().lower()[:1]
        except EOFError:
            return None
        except KeyboardInterrupt:
            print("--KeyboardInterrupt--")
