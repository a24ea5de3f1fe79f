"""Which devices a crash left unusable, so that a rescue saves the host-side state only.

Some CUDA errors (an illegal memory access, a device-side assert) poison the process's CUDA
context: every later CUDA call fails with the same error, and copying a tensor from the device
blocks or raises. A rescue after such an error must not touch the device: the state that lives
there is lost with the process, and the manifest says which. The rest — CPU modules and optimizers,
Python's, NumPy's and torch's CPU random generators, the loop position — is saved as usual.

The context is probed, not guessed from the message: a device synchronisation, bounded in time,
that raises or does not return says the device is unusable. An error that leaves the context
working (running out of memory) leaves the device state saved.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from daifu.core.bounded import TimedOut, bounded

PROBE_SECONDS = 5.0
"""How long the device may take to answer the probe: a poisoned context may block rather than fail."""


def unusable() -> dict[str, str]:
    """The device types whose state cannot be read now, each with the reason (empty when torch or
    CUDA was never used by the program: nothing to probe)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return {}
    why = probe(torch.cuda.synchronize)
    return {} if why is None else {"cuda": why}


def probe(synchronize: Callable[[], Any], seconds: float = PROBE_SECONDS) -> str | None:
    """Why the device `synchronize` waits for is unusable, or `None` when it answers in time."""
    try:
        bounded(synchronize, seconds=seconds)
    except TimedOut:
        return f"the device did not answer within {seconds:g} s; its context is taken as lost"
    except Exception as error:  # what a poisoned context raises: the error that poisoned it, again
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return f"the device's context is unusable after the crash ({type(error).__name__}: {first[:200]})"
    return None
