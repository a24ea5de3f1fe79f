"""Plays: a decision as it is stored in a record, a broadcast or `REPEAT_ACTIONS`.

A play is the prototype's name of a decision (`Surgery`, `Action`, `Pass`, `Retry`) plus its
code. Stored plays are plain data and become decisions only here, so reading a record never
runs code; the code runs only when the runtime carries the decision out, as it would have the
first time.
"""

from __future__ import annotations

from typing import Any

from daifu.core.decisions import Action, Decision, Retry, Skip, Surgery
from daifu.store.record import play_name

NAMES = ("Surgery", "Action", "Pass", "Retry")


class BadPlay(ValueError):
    """A stored play DaiFu cannot turn into a decision; the message names it."""


def to_decision(name: str, code: str | None) -> Decision:
    """The decision of play `name`; surgery and action need their `code`."""
    if name == "Pass":
        return Skip()
    if name == "Retry":
        return Retry()
    if name not in ("Surgery", "Action"):
        raise BadPlay(f"unknown play {name!r}; known: {', '.join(NAMES)}")
    if not isinstance(code, str) or not code.strip():
        raise BadPlay(f"the {name} play has no code")
    return Surgery(code) if name == "Surgery" else Action(code)


def to_data(decision: Decision) -> dict[str, Any]:
    """The play of `decision` as JSON-ready data."""
    return {"play": play_name(decision), "code": getattr(decision, "source", None) or getattr(decision, "code", None)}


def from_data(data: Any) -> Decision:
    """The decision stored by `to_data`; `BadPlay` for anything else."""
    if not isinstance(data, dict):
        raise BadPlay(f"a play must be an object, not {type(data).__name__}")
    return to_decision(str(data.get("play")), data.get("code"))
