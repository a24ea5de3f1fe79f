"""The embedded rules engine: offline, deterministic knowledge of common deep-learning crashes."""

from repairbot.rules.engine import analyse

__all__ = ["analyse"]
