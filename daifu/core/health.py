"""The health of a run, read from its live values: what a trial's verdict says beyond "it ran".

Before a trial, `inventory` notes the trained state reachable from the crashed frame's locals:
every `torch.nn.Module` and optimizer (in a local, in a list, tuple or dict held by a local, or
an attribute of an object held by a local), with the identity of the parameter tensors each
holds. At the end of the trial, `examine` says:

- which of them were discarded: the name now holds another object (a re-created model or
  optimizer), or the object no longer holds one of its parameter tensors (a re-created layer);
  tensors held beside them are the program's own growth (a layer inserted, `add_param_group`),
  not discarded state;
- where non-finite values appeared in the trained state (the parameters and gradients of each
  module, the state of each optimizer) that was finite before: the run is spoilt;
- which locals hold non-finite floating tensors (often the bad batch itself, passed over: a fact,
  not a failure);
- the loss before (the last value computed before the crash) and after, for scalar locals whose
  name says "loss";
- which parameters the crashed loss trains were left out of training while others of them were
  stepped (`daifu.core.trained`).

PyTorch is looked at only when the program imported it.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from daifu.core import trained

_LOOK_INSIDE = 64
"""Items of a container, or attributes of an object, looked at for modules and optimizers."""


@dataclass
class Held:
    """One module or optimizer, where it was found, the identity of its parameter tensors, and
    whether its state was all finite."""

    where: str
    obj: Any
    kind: str
    parameters: tuple[int, ...]
    finite: bool = True


@dataclass
class Inventory:
    """The trained state of a frame before a trial, and its loss values."""

    held: list[Held] = field(default_factory=list)
    losses: dict[str, float] = field(default_factory=dict)
    trained: list[trained.Trained] = field(default_factory=list)


@dataclass
class Health:
    """What `examine` found."""

    discarded: list[str] = field(default_factory=list)
    spoilt: list[str] = field(default_factory=list)
    nonfinite: list[str] = field(default_factory=list)
    losses_before: dict[str, float] = field(default_factory=dict)
    losses_after: dict[str, float] = field(default_factory=dict)
    untrained: list[str] = field(default_factory=list)


def inventory(namespace: Mapping[str, Any]) -> Inventory:
    """The modules and optimizers reachable from `namespace`, and its scalar losses."""
    torch = sys.modules.get("torch")
    found = Inventory()
    if torch is None:
        return found
    seen: set[int] = set()
    for where, value in reachable(namespace):
        kind = _kind(torch, value)
        if kind is not None and id(value) not in seen:
            seen.add(id(value))
            held = Held(where, value, kind, _parameter_ids(value, kind))
            held.finite = not _nonfinite_state(torch, held)
            found.held.append(held)
    found.losses = _losses(torch, namespace)
    found.trained = trained.noted(namespace, _optimized(found.held))
    return found


def examine(before: Inventory, namespace: Mapping[str, Any] | None) -> Health:
    """The health of the run now, against `before`; `namespace` is the frame's locals now (if known)."""
    torch = sys.modules.get("torch")
    health = Health(losses_before=dict(before.losses))
    if torch is None:
        return health
    now = dict(reachable(namespace)) if namespace is not None else {}
    for held in before.held:
        if namespace is not None and held.where in now and now[held.where] is not held.obj:
            health.discarded.append(f"`{held.where}` re-created (a new {held.kind})")
        elif not set(held.parameters) <= set(_parameter_ids(held.obj, held.kind)):
            health.discarded.append(f"the parameters of `{held.where}` replaced (new tensors)")
        if held.finite:
            health.spoilt += _nonfinite_state(torch, held)
    for where, value in now.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point() and not _finite(torch, value):
            health.nonfinite.append(f"`{where}`")
    if namespace is not None:
        health.losses_after = _losses(torch, namespace)
    health.untrained = trained.left_out(before.trained)
    for name, value in health.losses_after.items():
        if not math.isfinite(value) and math.isfinite(health.losses_before.get(name, math.nan)):
            health.spoilt.append(f"`{name}` became {value}")
    return health


def reachable(namespace: Mapping[str, Any] | None) -> Iterator[tuple[str, Any]]:
    """(where, value) for each local, each item of a container local, each attribute of an object local."""
    for name, value in (namespace or {}).items():
        if name.startswith("@"):
            continue
        yield name, value
        if isinstance(value, (list, tuple)):
            for index, item in enumerate(value[:_LOOK_INSIDE]):
                yield f"{name}[{index}]", item
        elif isinstance(value, dict):
            for key, item in list(value.items())[:_LOOK_INSIDE]:
                yield f"{name}[{key!r}]", item
        elif hasattr(value, "__dict__") and not isinstance(value, type) and _plain_object(value):
            for attribute, item in list(vars(value).items())[:_LOOK_INSIDE]:
                yield f"{name}.{attribute}", item


def _plain_object(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is None or not isinstance(value, (torch.nn.Module, torch.Tensor))


def _kind(torch: Any, value: Any) -> str | None:
    if isinstance(value, torch.nn.Module):
        return "module"
    if isinstance(value, torch.optim.Optimizer):
        return "optimizer"
    return None


def _optimized(held: list[Held]) -> dict[int, str]:
    """The parameters the held optimizers step (id -> where: a module's parameter by its name, else the
    optimizer's group and index)."""
    names = {id(p): f"{h.where}.{name}" for h in held if h.kind == "module" for name, p in h.obj.named_parameters()}
    return {id(p): names.get(id(p), f"{h.where}.param_groups[{g}][{i}]")
            for h in held if h.kind == "optimizer"
            for g, group in enumerate(h.obj.param_groups) for i, p in enumerate(group["params"])}


def _parameter_ids(obj: Any, kind: str) -> tuple[int, ...]:
    if kind == "module":
        return tuple(id(p) for p in obj.parameters())
    return tuple(id(p) for group in obj.param_groups for p in group["params"])


_CHUNK = 1 << 24
"""Elements checked at a time: a 4 GB parameter is read in slices, not copied into a mask as large."""


def _finite(torch: Any, tensor: Any) -> bool:
    if tensor.device.type == "meta" or tensor.numel() == 0:
        return True
    with torch.no_grad():
        flat = tensor.detach().reshape(-1)
        return all(bool(torch.isfinite(part).all()) for part in flat.split(_CHUNK))


def _nonfinite_state(torch: Any, held: Held) -> list[str]:
    found = []
    if held.kind == "module":
        for name, parameter in held.obj.named_parameters():
            if parameter.is_floating_point() and not _finite(torch, parameter):
                found.append(f"`{held.where}.{name}`")
            elif parameter.grad is not None and not _finite(torch, parameter.grad):
                found.append(f"the gradient of `{held.where}.{name}`")
    else:
        for state in held.obj.state.values():
            for key, value in state.items():
                if isinstance(value, torch.Tensor) and value.is_floating_point() and not _finite(torch, value):
                    found.append(f"the {key} state of optimizer `{held.where}`")
                    break
    return found[:8]


def losses(namespace: Mapping[str, Any]) -> dict[str, float]:
    """The scalar locals of `namespace` whose name says "loss": floats, and one-element floating tensors
    when PyTorch is loaded. What the record keeps at each repair, for a figure of a run that logs no metrics."""
    return _losses(sys.modules.get("torch"), namespace)


def _losses(torch: Any, namespace: Mapping[str, Any]) -> dict[str, float]:
    values = {}
    for name, value in namespace.items():
        if "loss" not in name.lower() or name.startswith("@"):
            continue
        if torch is not None and isinstance(value, torch.Tensor) and value.numel() == 1 and value.is_floating_point():
            try:
                values[name] = value.item()  # one call: `float(value.detach().reshape(()))` made three
            except RuntimeError:  # a tensor on a device that failed: no value to read
                continue
        elif isinstance(value, float):
            values[name] = value
    return values
