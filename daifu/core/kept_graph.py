"""Autograd graphs the run built before an in-process trial, kept whole through it.

An in-process trial runs the candidate on the live objects. When the crash came between a forward pass
and its backward (a loss of the wrong shape, a metric), the resumed iteration's backward goes through a
graph built before the crash, and the trial runs that backward first. A backward frees the saved
tensors of every node it passes, so the run itself, resumed after the rollback, would find its graph
freed ("backward through the graph a second time"): a change to the live process that no snapshot can
put back, and a trial that passed would be followed by a crash of the real run.

While a trial runs, `kept` makes a backward (or `torch.autograd.grad`) whose graph reaches a node
built before the trial keep the graph (`retain_graph=True`). The trial still sees what the run would:
the nodes such a backward passed are spent for the rest of the trial, and a later backward through one
of them raises torch's own error, as it would have without the keeping. (A spent node that saved no
tensor would not raise in torch: the trial then refuses where the run might not, never the reverse.)
The parameters' versions, which the trial's optimizer steps move, are put back by the rollback
(`daifu.core.rollback`).
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from daifu.core import health

_LIMIT = 200_000
"""Nodes looked at from one set of roots: a large model's graph is tens of thousands."""
_LEAF = "AccumulateGrad"
"""The node a leaf's gradient accumulates in: every graph of the model shares them, none saves a tensor."""


class Graph:
    """The nodes of the graphs built before a trial, and those the trial's backward passes spent."""

    def __init__(self, roots: Iterable[Any]) -> None:
        self.before: dict[int, Any] = {}  # by id; the node is held so that its id stays its own
        self.spent: dict[int, Any] = {}
        for node in _walk(root.grad_fn for root in roots):
            self.before[id(node)] = node

    def __bool__(self) -> bool:
        return bool(self.before)


def built_before(values: Mapping[str, Any]) -> Graph:
    """The graphs the tensors among `values` (and inside their containers) belong to: what the resumed
    iteration may still run a backward through."""
    torch = sys.modules.get("torch")
    if torch is None:
        return Graph(())
    return Graph(value for _, value in health.reachable(values)
                 if isinstance(value, torch.Tensor) and value.grad_fn is not None)


@contextlib.contextmanager
def kept(graph: Graph) -> Iterator[None]:
    """Within: `torch.autograd.backward` and `torch.autograd.grad` keep `graph` (the module docstring).
    Nothing changes where there is no graph built before the trial."""
    torch = sys.modules.get("torch")
    if torch is None or not graph:
        yield
        return
    autograd = torch.autograd
    backward, grad = autograd.backward, autograd.grad
    autograd.backward = _keeping(backward, "tensors", graph, backward)
    autograd.grad = _keeping(grad, "outputs", graph, backward)
    try:
        yield
    finally:
        autograd.backward, autograd.grad = backward, grad


def _keeping(
    original: Callable[..., Any], roots: str, graph: Graph, backward: Callable[..., Any]
) -> Callable[..., Any]:
    """`original` (a backward or `grad`), keeping `graph`'s nodes whole and counting what it spends."""
    signature = inspect.signature(original)

    def call(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        given = bound.arguments[roots]
        tensors = given if isinstance(given, (list, tuple)) else (given,)
        passed = {id(node): node for node in _walk(getattr(t, "grad_fn", None) for t in tensors)}
        if passed.keys() & graph.spent.keys():
            raise _spent_error(backward)
        if not passed.keys() & graph.before.keys():
            return original(*args, **kwargs)
        retain = bound.arguments.get("retain_graph")
        if not (bound.arguments.get("create_graph", False) if retain is None else retain):
            graph.spent.update(passed)
            bound.arguments["retain_graph"] = True
        return original(*bound.args, **bound.kwargs)

    return call


def _walk(starts: Iterable[Any]) -> Iterator[Any]:
    """Every node reachable from `starts` but the leaves' accumulators, each once, up to `_LIMIT`."""
    seen: set[int] = set()
    stack = [node for node in starts if node is not None]
    while stack and len(seen) < _LIMIT:
        node = stack.pop()
        if id(node) in seen or type(node).__name__ == _LEAF:
            continue
        seen.add(id(node))
        yield node
        stack.extend(following for following, _ in node.next_functions if following is not None)


def _spent_error(backward: Callable[..., Any]) -> RuntimeError:
    """The error the installed torch raises for a backward through a graph a backward already freed:
    made by doing just that on a throwaway graph, so its text is the version's own."""
    import torch

    with torch.enable_grad():
        leaf = torch.zeros((), requires_grad=True)
        out = leaf.exp()
        backward(out)
        try:
            backward(out)
        except RuntimeError as error:
            return error
    return RuntimeError("a backward in the trial went through a graph an earlier backward of the trial freed")
