"""The faults the cases meet on a CPU: what a GPU cluster does to training runs, injected in code.

- `flaky(target, fail_on, error)`: a PyTorch call (`torch.save`, `torch.load`, `torch.Tensor.to`,
  `torch.distributed.all_reduce`...) fails on chosen calls, as a file system, a link or a device
  fails now and then. The calls are counted from 1 in each process; with `seconds`, it keeps
  failing for that long (a device another process holds for a while).
- `SimulatedDevice`: an allocation guard standing for an accelerator's memory. Attached to a model,
  it estimates each forward pass's activations and raises the exception PyTorch raises on a GPU,
  `torch.OutOfMemoryError`, with the message the CUDA caching allocator writes, when they do not
  fit — or when another process holds the memory (`hold_by_other_process`).
- `BusyDevice(...)`: `Tensor.to` raises "CUDA-capable device(s) is/are busy or unavailable" for a
  while, as when another job holds a GPU in exclusive-process mode (`device_busy`, the error, also
  serves `flaky` for a program that counts only its own transfers).

The faults are the environment of a run, not its code: a restarted process (the checkpoint-retry
baseline) meets none of them, which `DLFB_NO_FAULTS=1` says.
"""

from __future__ import annotations

import errno
import functools
import importlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch

GiB = 1024**3
MiB = 1024**2
_ALLOCATOR_HINT = (
    "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
    "to avoid fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)


def enabled() -> bool:
    """Whether faults are injected in this process (not in a restarted, baseline one)."""
    return os.environ.get("DLFB_NO_FAULTS") != "1"


class Flaky:
    """The wrapper that replaced one call; `calls` counts the calls, `failures` the injected ones."""

    def __init__(self, owner: Any, name: str, original: Callable[..., Any], fail_on: set[int],
                 error: Callable[[], BaseException], caller: str | None = None, seconds: float = 0.0) -> None:
        self.owner, self.name, self.original = owner, name, original
        self.fail_on, self.error, self.caller, self.seconds = fail_on, error, caller, seconds
        self.calls = self.failures = 0
        self.until: float | None = None
        self._lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.caller is not None and not _called_from(self.caller):
            return self.original(*args, **kwargs)
        with self._lock:
            self.calls += 1
            now = time.monotonic()
            fail = self.calls in self.fail_on or (self.until is not None and now < self.until)
            if fail and self.seconds and self.until is None:
                self.until = now + self.seconds
            self.failures += fail
        if fail:
            raise self.error()
        return self.original(*args, **kwargs)

    def restore(self) -> None:
        setattr(self.owner, self.name, self.original)


def _called_from(filename: str, depth: int = 4) -> bool:
    """Whether one of the `depth` frames above the wrapper runs code of `filename`.

    PyTorch calls `Tensor.to` itself (in optimizers, in clipping); a fault meant for the program's
    own transfers counts only those, made directly or through a small helper such as `retrying`.
    """
    frame = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return False
        if frame.f_code.co_filename == filename:
            return True
        frame = frame.f_back
    return False


def _resolve(target: str) -> tuple[Any, str]:
    """The object holding `target`'s last attribute: `torch.Tensor.to` -> (torch.Tensor, "to")."""
    module_name, _, rest = target.partition(".")
    owner: Any = importlib.import_module(module_name)
    parts = rest.split(".")
    for index, part in enumerate(parts[:-1]):
        try:
            owner = getattr(owner, part)
        except AttributeError:
            owner = importlib.import_module(".".join([module_name, *parts[: index + 1]]))
    return owner, parts[-1]


_installed: dict[str, Flaky] = {}


def flaky(target: str, fail_on: Iterable[int], error: Callable[[], BaseException],
          caller: str | None = None, seconds: float = 0.0) -> Flaky | None:
    """Make the call `target` raise `error()` on the calls numbered in `fail_on` (from 1); `None` when disabled.

    With `caller` (a file name), only the calls made from that file are counted and can fail.
    With `seconds`, every call fails for that long after the first failure: a device held by
    another process for a while, rather than one lost call.
    """
    if not enabled():
        return None
    if target in _installed:  # a program run again in the same process gets a fresh schedule
        _installed.pop(target).restore()
    owner, name = _resolve(target)
    original = getattr(owner, name)
    wrapper = _installed[target] = Flaky(owner, name, original, set(fail_on), error, caller, seconds)
    # A plain function set on a class becomes a method: keep `self` by binding through a function.
    replacement = wrapper if not isinstance(owner, type) else _as_method(wrapper)
    setattr(owner, name, replacement)
    return wrapper


def _as_method(wrapper: Flaky) -> Callable[..., Any]:
    @functools.wraps(wrapper.original)
    def method(*args: Any, **kwargs: Any) -> Any:
        return wrapper(*args, **kwargs)

    return method


def io_error() -> OSError:
    """What a network file system raises on a write that did not get through."""
    return OSError(errno.EIO, "Input/output error")


def stale_handle() -> OSError:
    """What NFS raises when a file was replaced under an open handle."""
    return OSError(errno.ESTALE, "Stale file handle")


def ecc_error() -> RuntimeError:
    return torch.AcceleratorError(
        "CUDA error: uncorrectable ECC error encountered\nCUDA kernel errors might be asynchronously reported at "
        "some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing "
        "CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n")


def device_busy() -> RuntimeError:
    """What CUDA raises when another process holds a GPU that runs in exclusive-process mode."""
    return torch.AcceleratorError(
        "CUDA error: CUDA-capable device(s) is/are busy or unavailable\nCUDA kernel errors might be "
        "asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n"
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n")


def connection_reset() -> OSError:
    """What a read from object storage raises when the connection drops mid-transfer."""
    return ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")


def cublas_alloc_failed() -> RuntimeError:
    """What cuBLAS raises when it cannot allocate a handle's workspace: the device memory is held elsewhere."""
    return RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")


def collective_timeout(seq: int = 412, numel: int = 1) -> RuntimeError:
    """What the NCCL watchdog raises when a peer did not join an all-reduce in time."""
    return torch.distributed.DistBackendError(
        f"[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, "
        f"NumelIn={numel}, NumelOut={numel}, Timeout(ms)=600000) ran for 600023 milliseconds before timing out.")


class SimulatedDevice:
    """A GPU's memory, for a CPU run: a training forward pass needs `bytes_per_element` per input element.

    capacity: the device's memory; reserved: what the model, the optimizer state and the caching
    allocator already hold. `attach(model)` checks every forward pass of `model`.
    """

    def __init__(self, capacity: float = 15.77 * GiB, reserved: float = 1.2 * GiB,
                 bytes_per_element: float = 4 * MiB) -> None:
        self.capacity, self.reserved, self.bytes_per_element = capacity, reserved, bytes_per_element
        self.other: tuple[int, float, float] | None = None  # pid, bytes, until (monotonic)
        self.hold_from_call: tuple[int, int, float, float] | None = None
        self.calls = 0

    def attach(self, model: torch.nn.Module) -> SimulatedDevice:
        if enabled():
            model.register_forward_pre_hook(self._check_forward)
        return self

    def hold_by_other_process(self, from_call: int, seconds: float, pid: int = 31337,
                              amount: float = 14.9 * GiB) -> None:
        """From forward call `from_call` on, another process holds `amount` for `seconds`."""
        self.hold_from_call = (from_call, pid, amount, seconds)

    def _check_forward(self, module: torch.nn.Module, inputs: tuple[Any, ...]) -> None:
        if not torch.is_grad_enabled():
            return  # without autograd the activations are freed layer by layer: evaluation fits
        self.calls += 1
        if self.hold_from_call is not None and self.calls >= self.hold_from_call[0]:
            _, pid, amount, seconds = self.hold_from_call
            self.other, self.hold_from_call = (pid, amount, time.monotonic() + seconds), None
        if self.other is not None and time.monotonic() >= self.other[2]:
            self.other = None
        elements = sum(t.numel() for t in inputs if isinstance(t, torch.Tensor))
        self.allocate(elements * self.bytes_per_element)

    def allocate(self, size: float) -> None:
        """Raise `torch.OutOfMemoryError` as the CUDA allocator would when `size` bytes do not fit."""
        other = self.other[1] if self.other is not None else 0.0
        free = self.capacity - self.reserved - other
        if size <= free:
            return
        held = f"Process {self.other[0]} has {other / GiB:.2f} GiB memory in use. " if self.other else ""
        raise torch.OutOfMemoryError(
            f"CUDA out of memory. Tried to allocate {_size(size)}. GPU 0 has a total capacity of "
            f"{self.capacity / GiB:.2f} GiB of which {_size(max(free, 0.0) % (20 * MiB) + MiB)} is free. {held}"
            f"Including non-PyTorch memory, this process has {(self.capacity - other) / GiB:.2f} GiB memory in use. "
            f"Of the allocated memory {self.reserved / GiB:.2f} GiB is allocated by PyTorch, and 64.00 MiB is "
            f"reserved by PyTorch but unallocated. {_ALLOCATOR_HINT}")


def _size(size: float) -> str:
    return f"{size / GiB:.2f} GiB" if size >= GiB else f"{size / MiB:.2f} MiB"


_busy: dict[str, BusyDevice] = {}


class BusyDevice:
    """`Tensor.to` fails with "busy or unavailable" from call `from_call` for `seconds`."""

    def __init__(self, from_call: int, seconds: float) -> None:
        self.from_call, self.seconds = from_call, seconds
        self.until: float | None = None
        self.calls = 0
        self.original = torch.Tensor.to

    def install(self) -> BusyDevice:
        if enabled():
            if isinstance(_busy.get("device"), BusyDevice):
                _busy["device"].restore()
            _busy["device"] = self
            device = self

            @functools.wraps(self.original)
            def to(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
                device.check()
                return device.original(tensor, *args, **kwargs)

            torch.Tensor.to = to  # type: ignore[method-assign]
        return self

    def check(self) -> None:
        self.calls += 1
        if self.until is None and self.calls >= self.from_call:
            self.until = time.monotonic() + self.seconds
        if self.until is not None and time.monotonic() < self.until:
            raise device_busy()

    def restore(self) -> None:
        torch.Tensor.to = self.original  # type: ignore[method-assign]
