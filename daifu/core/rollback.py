"""What an in-process trial may change, copied before it runs and put back after, bit for bit.

A trial in the process itself (`daifu.core.inprocess`: where `fork` cannot go, as in a process that
initialised CUDA) runs the candidate on the live objects. `take` copies first what the candidate may
change, and `Snapshot.restore` puts it back in place — into the same objects, so that every reference
the program holds (an optimizer's parameters, a scheduler's optimizer) still points at them:

- the trained state reachable from the crashed frame and the module globals the function reads: every
  module's parameters, gradients (a gradient set to `None` gets its tensor back) and buffers, and which
  parameters, buffers and submodules it holds; every optimizer's per-parameter state and its
  parameter groups (learning rates); LR schedulers, grad scalers and the program's own objects, their
  attributes one level (tensors among them copied);
- the random generators: Python's, NumPy's, torch's CPU generator and every CUDA device's; torch's grad
  mode;
- the frame's locals: the tensors they hold (a batch changed in place), and the lists, dicts, sets,
  deques and bytearrays they and the globals the function reads hold, one level (a list of losses
  appended to);
- the function's module globals, rebound or added;
- what the runtime itself changes carrying a decision out (its versions, the function's code, the
  account of what repairs passed over), given by the caller as `undo` callables.

Tensors are copied on their own device where it has the room (`daifu.core.cuda.free_bytes`), else to
host memory (pinned where CUDA is in use); `take` refuses (a reason, no snapshot) when the host copy
does not fit in what `daifu.core.trial_memory.allowance` gives.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import random
import sys
import time
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from daifu.core import cuda, health, trial_memory

DEVICE_RESERVE = 512 * 2**20
"""Bytes left free on a device after a snapshot there: the candidate's own activations need room."""
_CONTAINERS = (list, dict, set, bytearray, collections.deque)


@dataclass
class Snapshot:
    """The copies, and how to put each back; `bytes` copied, `seconds` it took, `where` they went."""

    undo: list[Callable[[], None]] = field(default_factory=list)
    bytes: int = 0
    seconds: float = 0.0
    where: str = ""
    grad_enabled: bool | None = None
    """torch's grad mode when the trial began (`None`: torch not loaded); set back last, outside the
    restore's own `no_grad` (a trial that left a `with torch.no_grad()` of the live run turned it on)."""

    def restore(self) -> None:
        """Put everything back, the runtime's own state last. Every part is put back even when one
        fails; then `RollbackFailed` says which failed: the run must not go on as if all were back."""
        torch = sys.modules.get("torch")
        failed: list[str] = []
        with torch.no_grad() if torch is not None else contextlib.nullcontext():
            for undo in reversed(self.undo):
                try:
                    undo()
                except Exception as error:  # noqa: BLE001 - said below, after the rest is back
                    failed.append(f"{type(error).__name__}: {error}"[:200])
        if torch is not None and self.grad_enabled is not None:
            torch.set_grad_enabled(self.grad_enabled)
        cuda.synchronize()
        if failed:
            raise RollbackFailed(f"the in-process trial's state could not all be put back: {'; '.join(failed[:3])}")


class RollbackFailed(RuntimeError):
    """Part of what an in-process trial changed could not be put back: DaiFu's failure, which ends its
    handling of the crash (the user's exception goes on)."""


def take(watched: Mapping[str, Any], namespace: Mapping[str, Any], globals_: dict[str, Any],
         memory_setting: int | None, undo: Iterable[Callable[[], None]] = ()) -> Snapshot | str:
    """The snapshot of what a candidate may change, found from `watched` (the frame's locals and the
    globals its function reads), `namespace` (the locals the candidate starts from) and `globals_`;
    or why none can be taken (`memory: ...`). `undo`: the runtime's own restores, run last."""
    started = time.perf_counter()
    torch = sys.modules.get("torch")
    objects = _objects(torch, watched, namespace)
    tensors = _tensors(torch, objects, namespace) if torch is not None else []
    placement = _placement(tensors, memory_setting)
    if isinstance(placement, str):
        return placement
    snapshot = Snapshot(list(undo), grad_enabled=torch.is_grad_enabled() if torch is not None else None)
    _random_generators(snapshot, torch)
    _globals(snapshot, globals_)
    _containers(snapshot, _values({**watched, **namespace}))
    for obj in objects:
        _attributes(snapshot, obj)
    if torch is not None:
        copies = _copy_tensors(torch, tensors, placement)
        for obj in objects:
            _trained_state(snapshot, torch, obj, copies)
        for tensor in tensors:
            snapshot.undo.append(_put_back(torch, tensor, copies[id(tensor)]))
        snapshot.bytes = sum(_nbytes(t) for t in tensors)
        devices = {placement.get(id(t), "host") for t in tensors}
        snapshot.where = " and ".join(sorted(devices)) if devices else ""
    cuda.synchronize()
    snapshot.seconds = time.perf_counter() - started
    return snapshot


# -- what to copy --------------------------------------------------------------------------------


def _objects(torch: Any, watched: Mapping[str, Any], namespace: Mapping[str, Any]) -> list[Any]:
    """The modules (every submodule), optimizers, schedulers, grad scalers and the program's own objects
    reachable from `watched` and `namespace` (a local, an item of a container, an attribute of an object)."""
    found: dict[int, Any] = {}
    for values in (watched, namespace):
        for _, value in health.reachable(_values(values)):
            if id(value) in found:
                continue
            if torch is not None and isinstance(value, torch.nn.Module):
                for module in value.modules():
                    found.setdefault(id(module), module)
            elif _stateful(torch, value):
                found[id(value)] = value
    return list(found.values())


def _values(values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` but the modules: what a candidate may change is looked for in the program's values, never
    inside a module it imported (whose attributes hold the interpreter's own, such as its builtins)."""
    return {name: value for name, value in values.items() if not isinstance(value, types.ModuleType)}


def _stateful(torch: Any, value: Any) -> bool:
    """An optimizer, an LR scheduler, a grad scaler, or an object of a class the program defines."""
    if torch is not None:
        optim = torch.optim
        schedulers = tuple(kind for kind in (getattr(optim.lr_scheduler, "LRScheduler", None),
                                             getattr(optim.lr_scheduler, "_LRScheduler", None)) if kind is not None)
        scalers = tuple(kind for kind in (getattr(getattr(torch, "amp", None), "GradScaler", None),) if kind is not None)
        if isinstance(value, (optim.Optimizer, *schedulers, *scalers)):
            return True
    return _programs_own(value)


def _programs_own(value: Any) -> bool:
    """An instance (with attributes) of a class defined in the program's own files."""
    if isinstance(value, type) or not hasattr(value, "__dict__"):
        return False
    return _own_module(type(value).__module__)


@functools.lru_cache(maxsize=1024)
def _own_module(name: str) -> bool:
    """Whether module `name` is one of the program's own (not of a library or DaiFu)."""
    filename = getattr(sys.modules.get(name), "__file__", None)
    if filename is None:
        return name == "__main__"
    from daifu.core.trial import own_code

    return own_code(filename)


def _tensors(torch: Any, objects: list[Any], namespace: Mapping[str, Any]) -> list[Any]:
    """Every tensor to copy, once each: the trained state of `objects`, the tensors among their
    attributes and among the locals (and one level inside the locals' containers)."""
    found: dict[int, Any] = {}

    def add(value: Any) -> None:
        if isinstance(value, torch.Tensor) and value.layout == torch.strided and value.device.type != "meta":
            found.setdefault(id(value), value)

    for obj in objects:
        if isinstance(obj, torch.nn.Module):
            for parameter in obj.parameters(recurse=False):
                add(parameter)
                if parameter.grad is not None:
                    add(parameter.grad)
            for buffer in obj.buffers(recurse=False):
                add(buffer)
        elif isinstance(obj, torch.optim.Optimizer):
            for state in obj.state.values():
                for value in state.values():
                    add(value)
        for value in vars(obj).values():
            add(value)
    for _, value in health.reachable(_values(namespace)):
        add(value)
    return list(found.values())


def _nbytes(tensor: Any) -> int:
    return int(tensor.numel() * tensor.element_size())


def _placement(tensors: list[Any], memory_setting: int | None) -> dict[int, str] | str:
    """Where each tensor's copy goes (by id: `cuda:N` or `host`), or why the copies do not fit."""
    need: dict[str, int] = collections.defaultdict(int)
    for tensor in tensors:
        if tensor.device.type != "cpu":
            need[str(tensor.device)] += _nbytes(tensor)
    on_device = {device for device, count in need.items()
                 if device.startswith("cuda") and count + DEVICE_RESERVE <= cuda.free_bytes(device)}
    placement = {id(t): (str(t.device) if str(t.device) in on_device else "host") for t in tensors}
    host = sum(_nbytes(t) for t in tensors if placement[id(t)] == "host")
    room = trial_memory.allowance(memory_setting)
    if host > room.bytes:
        size = trial_memory.size
        return (f"memory: the in-process snapshot needs {size(host)} of host memory "
                f"(the device had no room for it), and {size(max(room.bytes, 0))} is {room.source}")
    return placement


def _copy_tensors(torch: Any, tensors: list[Any], placement: dict[int, str]) -> dict[int, Any]:
    """A copy of each tensor, by id, where `placement` says: on its device, or in (pinned) host memory."""
    pin = cuda.initialised()
    copies = {}
    for tensor in tensors:
        data = tensor.detach()
        if placement[id(tensor)] == "host" and data.device.type != "cpu":
            copy = torch.empty(data.shape, dtype=data.dtype, device="cpu", pin_memory=pin)
            copy.copy_(data, non_blocking=pin)
        else:
            copy = data.clone()
        copies[id(tensor)] = copy
    return copies


# -- how to put it back --------------------------------------------------------------------------


def _put_back(torch: Any, tensor: Any, copy: Any) -> Callable[[], None]:
    """Write `copy` back into `tensor` in place, and autograd's count of its in-place changes (its
    version) with it: a graph the run built before the trial (an episode's losses) saved the tensor at
    that version, and its backward pass refuses one changed since. A tensor whose data the candidate
    swapped for another shape or type gets data of the copy's."""
    version = tensor._version

    def undo() -> None:
        if tensor.shape == copy.shape and tensor.dtype == copy.dtype:
            tensor.copy_(copy)
        else:
            tensor.data = copy.to(tensor.device)
        _set_version(torch, tensor, version)
    return undo


def _set_version(torch: Any, tensor: Any, version: int) -> None:
    """Set `tensor`'s version back (`torch._C._autograd._unsafe_set_version_counter`; a torch without it
    leaves the version as the write made it, and a graph saved before the trial may then refuse)."""
    setter = getattr(getattr(torch._C, "_autograd", None), "_unsafe_set_version_counter", None)
    if setter is not None:
        setter((tensor,), (version,))


def _random_generators(snapshot: Snapshot, torch: Any) -> None:
    state = random.getstate()
    snapshot.undo.append(lambda: random.setstate(state))
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy_state = numpy.random.get_state()
        snapshot.undo.append(lambda: numpy.random.set_state(numpy_state))
    if torch is not None:
        cpu = torch.get_rng_state()
        snapshot.undo.append(lambda: torch.set_rng_state(cpu))
        devices = cuda.rng_states()
        snapshot.undo.append(lambda: cuda.set_rng_states(devices))


def _globals(snapshot: Snapshot, globals_: dict[str, Any]) -> None:
    """The module's bindings: those the candidate added are removed, those it rebound bound again."""
    saved = dict(globals_)

    def undo() -> None:
        for name in [name for name in globals_ if name not in saved]:
            del globals_[name]
        for name, value in saved.items():
            if globals_.get(name, _MISSING) is not value:
                globals_[name] = value
    snapshot.undo.append(undo)


_MISSING = object()


def _containers(snapshot: Snapshot, namespace: Mapping[str, Any]) -> None:
    """The lists, dicts, sets, deques and bytearrays the locals and the globals the function reads hold
    (and those inside them), one level."""
    seen: set[int] = set()
    for _, value in health.reachable(namespace):
        if isinstance(value, _CONTAINERS) and id(value) not in seen:
            seen.add(id(value))
            snapshot.undo.append(_refill(value))


def _refill(container: Any) -> Callable[[], None]:
    """Put `container`'s items back, in place (its identity kept)."""
    if isinstance(container, dict):
        items: Any = dict(container)
    elif isinstance(container, (set, collections.deque)):
        items = list(container)
    else:
        items = container[:]

    def undo() -> None:
        if isinstance(container, (list, bytearray)):
            container[:] = items
            return
        container.clear()
        if isinstance(container, collections.deque):
            container.extend(items)
        else:
            container.update(items)
    return undo


def _attributes(snapshot: Snapshot, obj: Any) -> None:
    """`obj`'s attributes, rebound or added, and the containers among them, one level."""
    attributes = vars(obj)
    saved = dict(attributes)
    for value in saved.values():
        if isinstance(value, _CONTAINERS):
            snapshot.undo.append(_refill(value))

    def undo() -> None:
        for name in [name for name in attributes if name not in saved]:
            del attributes[name]
        for name, value in saved.items():
            if attributes.get(name, _MISSING) is not value:
                attributes[name] = value
    snapshot.undo.append(undo)


def _trained_state(snapshot: Snapshot, torch: Any, obj: Any, copies: dict[int, Any]) -> None:
    """A module's gradients (a parameter whose gradient was set to `None` or replaced gets its own back),
    and an optimizer's per-parameter state and parameter groups."""
    if isinstance(obj, torch.nn.Module):
        for parameter in obj.parameters(recurse=False):
            grad = parameter.grad
            snapshot.undo.append(_grad_back(parameter, grad))
    elif isinstance(obj, torch.optim.Optimizer):
        state = obj.state
        held = {parameter: (values, dict(values)) for parameter, values in state.items()}
        groups = [(group, dict(group), list(group["params"])) for group in obj.param_groups]
        group_list = list(obj.param_groups)

        def undo() -> None:
            state.clear()
            for parameter, (values, items) in held.items():
                values.clear()
                values.update(items)
                state[parameter] = values
            for group, items, parameters in groups:
                group.clear()
                group.update(items)
                group["params"] = parameters
            obj.param_groups[:] = group_list
        snapshot.undo.append(undo)


def _grad_back(parameter: Any, grad: Any) -> Callable[[], None]:
    def undo() -> None:
        if parameter.grad is not grad:
            parameter.grad = grad
    return undo
