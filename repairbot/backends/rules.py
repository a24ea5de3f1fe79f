"""The `rules` backend: the embedded knowledge base of deep-learning crash patterns, offline and deterministic."""

from __future__ import annotations

from collections.abc import Sequence

from repairbot.backends.base import NO_QUESTIONS, Answer
from repairbot.deadline import Deadline
from repairbot.protocol import BackendInfo, CrashReport, Exchange
from repairbot.rules import analyse


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
