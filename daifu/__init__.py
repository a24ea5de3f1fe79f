"""DaiFu: in-situ crash recovery for deep-learning programs.

Vaccinate a training function with `@daifu.transform`; when one of its statements raises, the
crash is caught where it happens, with every live value kept, a decision is taken (by a policy,
the console or the repair bot), tried on a sandboxed copy of the run where it can be, and
execution resumes at the faulty statement.

The public names are loaded on first use, so `import daifu` (and `import daifu.x` of any
submodule) stays light.
"""

from __future__ import annotations

import importlib
import time
from typing import TYPE_CHECKING, Any

IMPORTED_AT = time.time()
"""When the program imported DaiFu: near its start, so `daifu show --plot` can tell what a restart costs."""

if TYPE_CHECKING:
    from daifu.config import TRANSFORM_REGISTRY, set_policy, settings
    from daifu.core.crash import Crash
    from daifu.core.decisions import Action, Patch, Plays, Raise, Retry, Skip, SkipIteration, Surgery
    from daifu.core.trial import Verdict
    from daifu.rescue.load import rescued
    from daifu.store.record import log_program_end
    from daifu.targets import configure
    from daifu.vaccinate import transform

__all__ = [
    "Action",
    "Patch",
    "Crash",
    "Plays",
    "Raise",
    "Retry",
    "Skip",
    "SkipIteration",
    "Surgery",
    "TRANSFORM_REGISTRY",
    "Verdict",
    "__version__",
    "configure",
    "log_checkpoint",
    "log_metric",
    "log_program_end",
    "logger",
    "repair",
    "rescued",
    "set_policy",
    "settings",
    "transform",
]

_PUBLIC = {
    "Action": "daifu.core.decisions",
    "Patch": "daifu.core.decisions",
    "Plays": "daifu.core.decisions",
    "Raise": "daifu.core.decisions",
    "Retry": "daifu.core.decisions",
    "Skip": "daifu.core.decisions",
    "SkipIteration": "daifu.core.decisions",
    "Surgery": "daifu.core.decisions",
    "Crash": "daifu.core.crash",
    "Verdict": "daifu.core.trial",
    "TRANSFORM_REGISTRY": "daifu.config",
    "configure": "daifu.targets",  # config.configure, and vaccinate=[...] carried out
    "set_policy": "daifu.config",
    "settings": "daifu.config",
    "log_program_end": "daifu.store.record",
    "rescued": "daifu.rescue.load",
    "transform": "daifu.vaccinate",
}


def log_metric(step: int, value: float, name: str = "loss") -> None:
    """Note that `name` (default: the loss) was `value` at training step `step`, in the workspace's
    `metrics.jsonl`, for `daifu show --plot` (`daifu.store.metrics`).

    `value` may be a number or a one-element tensor; a value that is not finite is kept as `null`.
    """
    from daifu.store import metrics

    metrics.log_metric(step, value, name, started=IMPORTED_AT)


def log_checkpoint(step: int) -> None:
    """Note that a checkpoint holding the state of training step `step` was saved: a restart would resume there."""
    from daifu.store import metrics

    metrics.log_checkpoint(step, started=IMPORTED_AT)


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
    elif name == "repair":
        value = importlib.import_module("daifu.repair")
    elif name == "logger":  # the prototype's `daifu.logger`: loguru's logger, its lines in the record
        value = importlib.import_module("daifu.store.record").loguru_logger()
    elif name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("daifu")
        except PackageNotFoundError:
            value = "0+unknown"
    else:
        raise AttributeError(f"module 'daifu' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
