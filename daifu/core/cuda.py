"""Every CUDA call DaiFu makes, in one place, each a no-op (or an empty answer) where CUDA is absent.

The rest of DaiFu never touches `torch.cuda` itself: what it needs of the device is asked here, so
that a machine without a GPU (or without torch) runs the same code paths with CUDA absent, and the
tests can say so. Nothing here initialises CUDA: a program that never used the device is not made to
(initialising it would, among other things, make every later fork trial impossible).

`poisoned(error)` tells the CUDA errors after which the process's CUDA context is unusable (a
device-side assert, an illegal memory access, a launch failure): every later CUDA call in the process
fails with the same error, so no repair can be tried or carried out there.
"""

from __future__ import annotations

import re
import sys
import traceback
from typing import Any

_POISONING = re.compile(
    r"device-side assert|illegal memory access|illegal address|misaligned address|unspecified launch failure"
    r"|illegal instruction|an illegal|CUDA_ERROR_ILLEGAL|CUDA_ERROR_LAUNCH_FAILED|cudaErrorIllegalAddress"
    r"|cudaErrorAssert|cudaErrorLaunchFailure|operation not permitted when stream is capturing",
    re.IGNORECASE,
)
"""The messages of the CUDA errors that leave the context unusable (CUDA's sticky errors)."""
_CUDA_ERROR = re.compile(r"\bCUDA error\b|\bCUDA_ERROR_|\bcudaError|\bCUBLAS_STATUS_EXECUTION_FAILED\b|AcceleratorError",
                         re.IGNORECASE)


def _may_name_cuda(text: str) -> bool:
    """Whether `text` may be a CUDA error's: every text `_CUDA_ERROR` matches holds one of these words
    in any case (their letters have no other case-insensitive match). A crash's message is tested
    here first: searching it with the expression costs five times more, and nearly none is CUDA's."""
    lowered = text.lower()
    return "cuda" in lowered or "cubla" in lowered or "acceleratorerror" in lowered


def _torch() -> Any:
    """torch if the program loaded it (never imported here), else `None`."""
    return sys.modules.get("torch")


def initialised() -> bool:
    """Whether this process has initialised CUDA (a fork of it would have no usable context)."""
    torch = _torch()
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_available() and torch.cuda.is_initialized())
    except Exception:  # noqa: BLE001 - a broken CUDA install: treated as none
        return False


def device_count() -> int:
    """The CUDA devices of an initialised context (0 without one)."""
    return int(_torch().cuda.device_count()) if initialised() else 0


def rng_states() -> list[Any]:
    """The random generator state of every CUDA device (empty without an initialised context)."""
    return list(_torch().cuda.get_rng_state_all()) if initialised() else []


def set_rng_states(states: list[Any]) -> None:
    """Put back what `rng_states` returned."""
    if states:
        _torch().cuda.set_rng_state_all(states)


def empty_cache() -> bool:
    """Give the memory the caching allocator holds unused back to the device; whether there was a device."""
    if not initialised():
        return False
    _torch().cuda.empty_cache()
    return True


def synchronize() -> None:
    """Wait for every queued kernel (a snapshot must be complete before a trial writes over what it copied)."""
    if initialised():
        _torch().cuda.synchronize()


def free_bytes(device: Any) -> int:
    """Bytes free on CUDA `device` (0 without an initialised context): the room for a snapshot there."""
    if not initialised():
        return 0
    free, _total = _torch().cuda.mem_get_info(device)
    return int(free)


def release(error: BaseException) -> None:
    """Let go of what an out-of-memory `error` left held before the run resumes: the locals of the
    finished frames its traceback holds (a model's activations in its `forward`), then the memory the
    caching allocator holds unused. The traceback keeps its lines; only those locals go."""
    traceback.clear_frames(error.__traceback__)
    empty_cache()


def out_of_memory(error: BaseException) -> bool:
    """Whether `error` is running out of memory on a device (`torch.OutOfMemoryError`, or its message)."""
    torch = _torch()
    kind = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    if kind is not None and isinstance(error, kind):
        return True
    return isinstance(error, (RuntimeError, MemoryError)) and "out of memory" in _message(error).lower()


def poisoned(error: BaseException) -> str | None:
    """Why `error` leaves this process's CUDA context unusable (a sticky CUDA error), or `None` when it
    does not: the first line of its message, recognised by the error family, never by one wording."""
    return poisoned_text(f"{type(error).__name__}: {_message(error)}")


def poisoned_text(text: str) -> str | None:
    """`poisoned` for an error already made text (`Type: message`, as a trial's verdict holds it)."""
    if not (_may_name_cuda(text) and _CUDA_ERROR.search(text) and _POISONING.search(text)):
        return None
    return text.strip().splitlines()[0][:200]


def _message(error: BaseException) -> str:
    """The error's message; one whose class makes its own (`__str__` of the program's) is made under a
    deadline (`daifu.core.bounded`): a message that never comes must not hold the crash."""
    if type(error).__str__ is BaseException.__str__:
        try:
            return str(error)
        except Exception:  # noqa: BLE001 - an error whose message cannot be made says nothing
            return ""
    from daifu.core.bounded import describe

    return describe(error, str)
