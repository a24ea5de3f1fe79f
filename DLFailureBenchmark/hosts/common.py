"""Small helpers every host uses: seeding, the result summary, and the retry a person adds after a flaky call."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import torch

T = TypeVar("T")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def tail_mean(values: Sequence[float], count: int = 20) -> float:
    """The mean of the last `count` values: a final loss that one noisy step does not swing."""
    tail = list(values)[-count:]
    return float(sum(tail) / len(tail)) if tail else float("nan")


def retrying(fn: Callable[..., T], *args: Any, attempts: int = 5, wait: float = 0.0,
             errors: tuple[type[BaseException], ...] = (OSError, RuntimeError), **kwargs: Any) -> T:
    """`fn(*args, **kwargs)`, tried up to `attempts` times on `errors`, sleeping `wait` s between tries.

    The fix people write once a transient failure has cost them a run.
    """
    for attempt in range(1, attempts + 1):
        try:
            return fn(*args, **kwargs)
        except errors:
            if attempt == attempts:
                raise
            time.sleep(wait)
    raise AssertionError("unreachable")
