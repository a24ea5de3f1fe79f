"""Backends answer a crash report with a diagnosis and suggestions; the server picks one by name.

`rules` is embedded, offline and deterministic; `openai` asks an OpenAI-compatible model and
falls back to `rules`, saying why, whenever the model fails or answers garbage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from repairbot.protocol import CrashReport
from repairbot.protocol import BackendInfo, Diagnosis, Suggestion
from repairbot.rules import analyse


@dataclass
class Answer:
    """A backend's answer; `fallback_reason` is set when `backend_used` is not the one asked."""

    diagnosis: Diagnosis
    suggestions: list[Suggestion]
    backend_used: str
    fallback_reason: str | None = None


class Backend(Protocol):
    name: str

    def diagnose(self, report: CrashReport) -> Answer: ...

    def suggest(self, report: CrashReport) -> Answer: ...

    def info(self) -> BackendInfo: ...


class UnknownBackend(ValueError):
    """A backend name the server does not know; the message lists those it does."""


class RulesBackend:
    """The embedded knowledge base of deep-learning crash patterns (`repairbot.rules`)."""

    name = "rules"

    def diagnose(self, report: CrashReport) -> Answer:
        return Answer(analyse(report)[0], [], self.name)

    def suggest(self, report: CrashReport) -> Answer:
        diagnosis, suggestions = analyse(report)
        return Answer(diagnosis, suggestions, self.name)

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
