"""The backends the server knows, by name: the one list `daifu serve --backend` and `/v1/backends` offer."""

from __future__ import annotations

from repairbot.backends.base import Backend
from repairbot.backends.rules import RulesBackend


class UnknownBackend(ValueError):
    """A backend name the server does not know; the message lists those it does."""


NAMES = ("rules", "openai")


def make_backend(name: str) -> Backend:
    """A new backend by name, configured from the environment."""
    if name == "rules":
        return RulesBackend()
    if name == "openai":
        from repairbot.backends.openai import OpenAIBackend  # loads the openai SDK

        return OpenAIBackend()
    raise UnknownBackend(f"Backend {name!r} is unknown; known backends: {', '.join(NAMES)}.")
