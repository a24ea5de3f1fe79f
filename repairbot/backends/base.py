"""Backends answer a crash report with a diagnosis and suggestions; the server picks one by name.

`rules` is embedded, offline and deterministic; `openai` asks an OpenAI-compatible model and
adds the rules engine's suggestions to the model's, standing in for the model entirely, and
saying why, whenever it fails or answers nothing usable.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from repairbot.bounds import MAX_SUGGESTIONS
from repairbot.protocol import CrashReport
from repairbot.deadline import Deadline
from repairbot.protocol import BackendInfo, Diagnosis, Exchange, Suggestion, Transcript
from repairbot.rules import analyse

NO_QUESTIONS = (
    "The rules engine answers no free-form questions: its diagnosis and suggestions are all it can say "
    "(a model does: `daifu serve --backend openai`)."
)
"""The answer to a person's question when the rules engine is the one answering."""


@dataclass
class Answer:
    """A backend's answer.

    fallback_reason: why the rules engine stood in for the backend, wholly (`backend_used` is
    then `rules`) or for the suggestions. notes: what the backend did with the model's reply.
    answer: the answer to the person's question, in words (`None` when none was asked).
    transcript: the model call made, if any.
    """

    diagnosis: Diagnosis
    suggestions: list[Suggestion]
    backend_used: str
    fallback_reason: str | None = None
    notes: list[str] = field(default_factory=list)
    answer: str | None = None
    transcript: Transcript | None = None


class Backend(Protocol):
    """What the server needs of a backend. `deadline`: when the answer is due, and whether the
    client is still there; a backend that calls out must stop waiting when it is `over`.
    `question` and `conversation`: a person's question about the crash and the earlier rounds
    (the console's `ask`), passed only when a request holds them; a backend that cannot answer in
    words says so in `Answer.answer`."""

    name: str

    def diagnose(
        self,
        report: CrashReport,
        deadline: Deadline | None = None,
        *,
        question: str | None = None,
        conversation: Sequence[Exchange] = (),
    ) -> Answer: ...

    def suggest(
        self,
        report: CrashReport,
        deadline: Deadline | None = None,
        *,
        question: str | None = None,
        conversation: Sequence[Exchange] = (),
    ) -> Answer: ...

    def info(self) -> BackendInfo: ...


class UnknownBackend(ValueError):
    """A backend name the server does not know; the message lists those it does."""


class RulesBackend:
    """The embedded knowledge base of deep-learning crash patterns (`repairbot.rules`)."""

    name = "rules"

    def diagnose(
        self,
        report: CrashReport,
        deadline: Deadline | None = None,
        *,
        question: str | None = None,
        conversation: Sequence[Exchange] = (),
    ) -> Answer:
        return Answer(analyse(report)[0], [], self.name, answer=NO_QUESTIONS if question else None)

    def suggest(
        self,
        report: CrashReport,
        deadline: Deadline | None = None,
        *,
        question: str | None = None,
        conversation: Sequence[Exchange] = (),
    ) -> Answer:
        diagnosis, suggestions = analyse(report)
        return Answer(diagnosis, suggestions, self.name, answer=NO_QUESTIONS if question else None)

    def info(self) -> BackendInfo:
        return BackendInfo(name=self.name, available=True, detail="embedded, offline, deterministic")


NAMES = ("rules", "openai")


def make_backend(name: str) -> Backend:
    """A new backend by name, configured from the environment."""
    if name == "rules":
        return RulesBackend()
    if name == "openai":
        from repairbot.openai_backend import OpenAIBackend

        return OpenAIBackend()
    raise UnknownBackend(f"Backend {name!r} is unknown; known backends: {', '.join(NAMES)}.")


def merge(model: list[Suggestion], rules: list[Suggestion]) -> list[Suggestion]:
    """The model's suggestions and the rules engine's, best first, each repair once.

    When both propose the same repair, the model's entry is kept with the higher confidence of
    the two. Ties in confidence keep the model's first.
    """
    kept: dict[tuple[str, str, str | None], Suggestion] = {}
    for suggestion in model + rules:
        key = (suggestion.kind, canonical(suggestion.code), suggestion.target)
        if key in kept:
            first = kept[key]
            kept[key] = first.model_copy(update={"confidence": max(first.confidence, suggestion.confidence)})
        else:
            kept[key] = suggestion
    return sorted(kept.values(), key=lambda s: -s.confidence)[:MAX_SUGGESTIONS]


def canonical(code: str) -> str:
    """Code compared by its syntax tree, so layout and comments do not make two repairs differ."""
    try:
        return ast.dump(ast.parse(textwrap.dedent(code)))
    except SyntaxError:
        return code
