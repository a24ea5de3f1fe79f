"""What a rule sees of a crash, and how it turns an edit into a suggestion.

The *site* is the frame to repair: the deepest frame of user code (not a library) that runs a
function of its own `def` — the vaccinated function itself or a user callee whose source the
report carries. A comprehension, generator expression or lambda is repaired in the function whose
`def` holds it: the nearest one around its frame. An edit at the vaccinated function becomes a
surgery; an edit at a callee becomes a `patch_function`.
"""

from __future__ import annotations

import re
import tokenize
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from repairbot.protocol import CrashReport, Frame, Variable
from repairbot.bounds import bounded_suggestions
from repairbot.protocol import Culprit, Suggestion
from repairbot.rules.edit import Transform, edit_statement, tokens, wrap_name
from repairbot.signs import wait_code

__all__ = ["ReportView", "Finding", "present", "retry", "search", "skip", "wait_code"]


MAX_NAMES = 16
"""Variables of the faulty statement the rules make suggestions about; each may cost a parse of the source."""


@dataclass
class Finding:
    """A rule's answer: the crash's category, what happened in plain words, and repairs."""

    category: str
    explanation: str
    suggestions: list[Suggestion]


@dataclass
class ReportView:
    """One crash report, seen from the site to repair."""

    report: CrashReport
    outermost: bool = False
    """Whether to see the crash from the vaccinated function even when a callee is at fault."""

    def outer(self) -> ReportView:
        """The same crash seen from the vaccinated function, where actions run."""
        return ReportView(self.report, outermost=True)

    @cached_property
    def message(self) -> str:
        """The exception's message with those of its causes, for pattern matching."""
        parts = [self.report.exception.message] + [link.message for link in self.report.exception.chain]
        return "\n".join(parts)

    @cached_property
    def exception_types(self) -> set[str]:
        return {self.report.exception.type} | {link.type for link in self.report.exception.chain}

    @cached_property
    def site_index(self) -> int:
        frames = self.report.frames
        if self.outermost:
            return 0
        for index in range(len(frames) - 1, 0, -1):
            frame = frames[index]
            if not frame.library and frame.source and frame.own_def:
                return index
        return 0

    @property
    def at_function(self) -> bool:
        """Whether the site is the vaccinated function (so repairs are surgeries)."""
        return self.site_index == 0

    @property
    def site(self) -> Frame:
        return self.report.frames[self.site_index]

    @cached_property
    def statement(self) -> str:
        return self.report.function.statement if self.at_function else self.site.code

    @cached_property
    def variables(self) -> dict[str, Variable]:
        return self.report.variables if self.at_function else self.site.locals

    @cached_property
    def names(self) -> list[str]:
        """Variable names the faulty statement reads or writes, in order, each once (the first `MAX_NAMES`)."""
        seen: dict[str, None] = {}
        found = tokens(self.statement)
        for i, tok in enumerate(found):
            if tok.type == tokenize.NAME and (i == 0 or found[i - 1].string != "."):
                seen.setdefault(tok.string, None)
        return [name for name in seen if name in self.variables][:MAX_NAMES]

    def facts(self, name: str) -> dict[str, Any]:
        variable = self.variables.get(name)
        return variable.facts if variable is not None else {}

    def tensors(self) -> list[tuple[str, dict[str, Any]]]:
        """The tensors the faulty statement uses, with their facts."""
        return [(n, self.facts(n)) for n in self.names if self.variables[n].type == "Tensor"]

    def culprit(self, reason: str) -> Culprit:
        return Culprit(
            function=self.site.qualname or self.site.function,
            filename=self.site.filename,
            lineno=self.site.lineno,
            reason=reason,
        )

    def edit(self, transform: Transform, explanation: str, confidence: float) -> Suggestion | None:
        """The repair that applies `transform` to the faulty statement, or `None` if it cannot."""
        if self.at_function:
            f = self.report.function
            new = edit_statement(
                f.source, f.first_lineno, f.lineno, f.statement.rstrip("\n").count("\n") + 1, transform
            )
            return (
                None
                if new is None
                else Suggestion(kind="surgery", code=new, explanation=explanation, confidence=confidence)
            )
        site = self.site
        if site.source is None or site.first_lineno is None or "<locals>" in site.qualname or not site.module:
            return None  # a nested function cannot be reached from the faulty frame
        new = edit_statement(site.source, site.first_lineno, site.lineno, 1, transform)
        if new is None:
            return None
        return Suggestion(
            kind="patch_function",
            code=new,
            target=self.callee_target(),
            confidence=confidence,
            explanation=f"{explanation} (in {site.qualname}, called from {self.report.function.qualname})",
        )

    def callee_target(self) -> str:
        """An expression reaching the site's function from the faulty frame, through `sys.modules`."""
        site = self.site
        return f"sys.modules[{site.module!r}].{site.qualname}"

    def wrap(self, name: str, template: str, explanation: str, confidence: float) -> Suggestion | None:
        """The edit rewriting each read of `name` in the statement as `template.format(name)`."""
        return self.edit(wrap_name(name, template), explanation, confidence)

    def action(self, code: str, explanation: str, confidence: float) -> Suggestion | None:
        """An action; `None` if it names variables of a callee, since actions run in the vaccinated frame."""
        if not self.at_function:
            return None
        return Suggestion(kind="action", code=code, explanation=explanation, confidence=confidence)

    def tried_count(self) -> int:
        return len(self.report.tried)


def retry(explanation: str, confidence: float) -> Suggestion:
    return Suggestion(kind="retry", explanation=explanation, confidence=confidence)


def skip(explanation: str, confidence: float) -> Suggestion:
    return Suggestion(kind="skip", explanation=explanation, confidence=confidence)


def search(pattern: str, text: str) -> re.Match[str] | None:
    """`re.search`, ignoring case: messages vary in capitals between PyTorch versions."""
    return re.search(pattern, text, re.IGNORECASE)


def present(*suggestions: Suggestion | None) -> list[Suggestion]:
    """The suggestions that could be made, best first, each once, as many as an answer holds."""
    return bounded_suggestions([s for s in suggestions if s is not None])
