"""Optimizer steps taken in this process: what tells a trial whether training goes on after a repair.

One global post-step hook (`torch.optim.optimizer.register_optimizer_step_post_hook`) counts every
`step()` of every optimizer, once torch is loaded: the runtime installs it when a function is
vaccinated (so that a crash knows whether the program was taking steps before it), and a trial's copy
when it was not (`daifu.core.trial`). A step the program never makes (a `GradScaler` that found
non-finite gradients, a repair that passes over the iteration) is not counted. The hook costs one
call that adds one per optimizer step; nothing else of the run changes.
"""

from __future__ import annotations

import sys
from typing import Any

_taken = [0]
_installed = [False]


def install() -> bool:
    """Count the optimizer steps from now on, if torch is loaded (once); whether they are counted."""
    if _installed[0]:
        return True
    optimizer = sys.modules.get("torch.optim.optimizer")  # loaded with torch; not an attribute of torch.optim
    register = getattr(optimizer, "register_optimizer_step_post_hook", None)
    if register is None:
        return False
    register(_counted)
    _installed[0] = True
    return True


def _counted(optimizer: Any, args: Any, kwargs: Any) -> None:
    _taken[0] += 1


def taken() -> int | None:
    """The optimizer steps counted so far; `None` when they are not counted (torch was not loaded)."""
    return _taken[0] if _installed[0] else None


def count(taken_before: int) -> None:
    """Set the count back to `taken_before`: the steps an in-process trial took were put back."""
    _taken[0] = taken_before
