"""A module-level function for the tests that patch a callee in place."""

from __future__ import annotations


def halve(x: int) -> int:
    return x / 2  # type: ignore[return-value]  # the bug a patch fixes: a float where an int is meant


_ORIGINAL = halve.__code__


def restore() -> None:
    """Put the original code back after a test patched it."""
    halve.__code__ = _ORIGINAL
