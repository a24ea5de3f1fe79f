"""The parameters the crashed iteration's loss trains, and whether a repair stops training some of them.

A repair can let the run go on and still cut part of the model out of training: `prototypes.detach()`
where a branch's output is carried into the next iteration (its parameters get no gradient from then
on), `h.detach()` where features leave the encoder. The loss looks fine, the steps are taken, and one
branch silently stays as it was. The crashed loss's own autograd graph says what the program meant to
train: its structure outlives a backward pass (only the saved tensors are freed), so the leaves it
reaches are known at the crash, whatever the error. Of those, the ones an optimizer holds are what the
program trains; an optimizer step changes a parameter in place, which moves its version counter.

`noted` reads them (and their versions) from the frame's loss locals when a trial starts; `left_out`
says which were not changed while others of them were: the optimizer stepped, and skipped them. Nothing
is said while none changed (no step yet, a skipped iteration): the horizon's step count judges that.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_NODES = 100_000
"""Nodes of a graph walked at most: a long unrolled graph is read in part, never without end."""


@dataclass(frozen=True)
class Trained:
    """One parameter the crashed loss trains: where it is held, the tensor, its version at the crash."""

    where: str
    tensor: Any
    version: int


def noted(namespace: Mapping[str, Any], optimized: Mapping[int, str]) -> list[Trained]:
    """The parameters of `optimized` (id -> where it is held) that the graphs of `namespace`'s loss
    tensors reach, with their versions now."""
    torch = sys.modules.get("torch")
    if torch is None or not optimized:
        return []
    roots = [value.grad_fn for name, value in namespace.items()
             if "loss" in name.lower() and isinstance(value, torch.Tensor) and value.grad_fn is not None]
    found: dict[int, Trained] = {}
    seen: set[int] = set()
    todo = list(roots)
    while todo and len(seen) < _NODES:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        leaf = getattr(node, "variable", None)
        if isinstance(leaf, torch.Tensor) and id(leaf) in optimized:
            found.setdefault(id(leaf), Trained(optimized[id(leaf)], leaf, leaf._version))
        todo.extend(next_node for next_node, _ in getattr(node, "next_functions", ()))
    return list(found.values())


def left_out(trained: list[Trained]) -> list[str]:
    """Where the parameters of `trained` are held that no step changed, while a step changed others of them."""
    changed = [t for t in trained if t.tensor._version != t.version]
    if not changed:
        return []
    return [f"`{t.where}`" for t in trained if t.tensor._version == t.version]
