"""What a backend is and what it answers: the `Backend` protocol, its `Answer`, and how two lists of
suggestions are merged (a model's and the rules engine's)."""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from repairbot.bounds import MAX_SUGGESTIONS
from repairbot.deadline import Deadline
from repairbot.protocol import BackendInfo, CrashReport, Diagnosis, Exchange, Suggestion, Transcript

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
