"""Deciding a crash once for every rank of a `torch.distributed` job.

A crash that every rank meets (a shape bug at the same step) must get one decision — taken by the
leader rank, which owns the terminal (rank 0, or `DAIFU_DIST_LEADER`), through the console, a
policy or the repair bot — and every rank must apply it. A crash that one rank alone meets (its
exceptional batch) must be decided on that rank, quickly, while the others wait in their next
collective. Both go through the process group's key-value store, which works when the other ranks
are blocked in a collective: a collective could not.

For its n-th crash with a given fingerprint (function, line, exception type), a rank:

- if it is the leader: announces `daifu/<fingerprint>/<n>/deciding`, decides, and publishes the
  decision under `.../decision`;
- else: waits up to `DAIFU_DIST_GRACE` seconds (default 5) for the leader's announcement. Seen:
  it waits for the leader's decision (at most `DAIFU_DIST_DECISION_TIMEOUT` seconds, default 1800,
  or the remote deadline and ten minutes more with `approve="remote"`, then raises) and applies
  it. Not seen: the crash is its own; it decides locally, without a console (no rank but the
  leader ever prompts), by policy, switches or the repair bot.

Keep the process group's own timeout (`init_process_group(timeout=...)`) above the time a
decision may take, or the waiting ranks' collectives fail first.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
from typing import Any
from collections.abc import Callable

from daifu.config import Settings
from daifu.core import kinds
from daifu.core.crash import Crash
from daifu.core.decisions import Decision, Raise
from daifu.core.handling import RepairContext
from daifu.decide.contract import DecidedBy
from daifu.ranks import leader
from daifu.say import say
from daifu.state import RUN

_lock = threading.Lock()


def _seconds(variable: str, default: float) -> float:
    try:
        return float(os.environ.get(variable, default))
    except ValueError:
        return default


def encode(decision: Decision) -> str:
    """A decision as JSON (`daifu.core.kinds.to_data`). Decoding one never runs code."""
    return json.dumps(kinds.to_data(decision))


def decode(text: str | bytes) -> Decision:
    """The decision `encode` wrote."""
    return kinds.from_data(json.loads(text))


def _key(crash: Crash) -> str:
    identity = f"{crash.qualname}:{crash.lineno}:{crash.exception_type}"
    fingerprint = hashlib.sha1(identity.encode()).hexdigest()[:16]
    with _lock:
        RUN.occurrences[fingerprint] += 1
        return f"daifu/{fingerprint}/{RUN.occurrences[fingerprint]}"


def coordinate(
    crash: Crash, context: RepairContext, decide_here: Callable[[Crash, bool], tuple[Decision, DecidedBy]]
) -> tuple[Decision, DecidedBy]:
    """The decision for `crash`, shared with the ranks that meet the same crash.

    `decide_here(crash, console_allowed)` takes a decision in this process.
    """
    dist = sys.modules["torch.distributed"]
    store: Any = dist.distributed_c10d._get_default_store()  # the group's store: reachable while peers block
    key, me = _key(crash), dist.get_rank()
    if me == leader():
        store.set(f"{key}/deciding", str(me))
        decision, decided_by = decide_here(crash, True)
        store.set(f"{key}/decision", encode(decision))
        return decision, decided_by
    if not _wait_for(store, f"{key}/deciding", _seconds("DAIFU_DIST_GRACE", 5.0)):
        return decide_here(crash, False)
    waiting = _seconds("DAIFU_DIST_DECISION_TIMEOUT", _decision_timeout(context.settings))
    if not _wait_for(store, f"{key}/decision", waiting):
        say(f"rank {leader()} took no decision on {crash.exception_type} at {crash.filename}:{crash.lineno} in time")
        return Raise(), DecidedBy.LEADER
    return decode(store.get(f"{key}/decision")), DecidedBy.LEADER


def _decision_timeout(settings: Settings) -> float:
    """How long a rank waits for the leader's decision by default: 1800 s, or, when a person decides
    in a browser (`approve="remote"`), as long as the leader may wait for them, and ten minutes more."""
    return max(1800.0, settings.remote_deadline + 600.0) if settings.approve == "remote" else 1800.0


def _wait_for(store: Any, key: str, seconds: float) -> bool:
    """Poll the store for `key` (no store timeouts: they print C++ warnings on every rank)."""
    deadline = time.monotonic() + seconds
    while not store.check([key]):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True
