"""Whether running statements a second time changes more than what they compute.

A surgery that changes a statement above the faulty one resumes there (`daifu.decide.reruns`): the
statements from there down to the crash run again, with the values they find. That is harmless when
each computes the same values from the same inputs and touches nothing else, and harmful when it

- reads a name whose value it, or a statement after it up to the crash, has changed since it first ran
  (`total += loss` adds the loss twice, `step += 1` counts the step twice) — read before it binds the
  name itself: an `if` run again from its header that computes `p` and then reads it makes `p` afresh;
  a statement the surgery
  inserted never ran, so it changed nothing yet, and runs once: only what it reads is judged;
- writes into an object (an attribute, an item, an in-place method: `history.append(v)`, `w.add_(g)`);
- calls what is not known to compute only: a random draw (the run's random stream moves on), I/O, the
  program's own functions, a model that draws random numbers (dropout) or updates statistics (batch
  norm) in training mode.

What is known to compute only is an allowlist: the numeric libraries' pure functions
(`daifu.decide.allowlist_numeric`) less the random ones, the computing methods of tensors and arrays
less in-place and random ones, a few builtins, the context managers of autograd's mode (`torch.no_grad`),
the resets that set what they change whatever they find (`optimizer.zero_grad()`: run again where it ran,
it leaves what its first run left, and a backward that failed half way leaves no partial gradients),
and calling a model that is in evaluation mode or holds
no module of those kinds (its `forward` is the program's code, judged by what it is built of: the
cautious reading of every custom forward would refuse nearly every repair above a model call).
Unattended (`approve="auto"`), a repair whose re-run statements do any of this needs a person.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import re
import sys
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from daifu.core.blocks import COMPOUND
from daifu.core.names import bound_names
from daifu.decide.allowlist_numeric import pure_objects, tensor_methods
from daifu.decide.allowlist_tables import CONTEXT_MANAGERS, RESETS
from daifu.decide.reruns import Rerun

PURE_BUILTINS = frozenset(
    "abs all any bool divmod enumerate float int isinstance len list max min pow range reversed round sorted str sum "
    "tuple zip".split()
)
"""Builtins that only compute from their arguments (`map`, `filter` run a callable: not here)."""
_RANDOM = re.compile(r"rand|dropout|normal|bernoulli|multinomial|poisson|gumbel|rrelu|shuffle|choice|permutation|"
                     r"uniform|exponential|geometric|cauchy|sample", re.IGNORECASE)
"""Names of functions and methods that draw random numbers."""
_MISSING = object()
_DRAWS = ", which draws random numbers: they come out different the second time"
"""Said of a random draw run again; the first statement that runs again (the one a repair changes, or the
one below the statements it inserts) is judged without it, and without a model's dropout: a fix where a
value is made has to make the value again, random or not (the program's random stream is one draw on)."""
_DROPOUT = "in training mode, which draws random numbers for its dropout"
"""Said of a model with dropout called again; as a random draw, not said of the first statement run again."""
_CONSTRUCTORS = ("tensor", "as_tensor", "from_numpy")
"""torch's functions that make a tensor from the values given, beside its operators."""


def rerun_effects(found: list[Rerun], names: Mapping[str, Any], module: Mapping[str, Any]) -> list[str]:
    """Why running `found` a second time may change more than what they compute (empty: it cannot), with
    the crashed frame's `names` and its function's `module` globals."""
    problems: list[str] = []
    before: set[str] = set()
    known = _Known(pure_objects(), tensor_methods(), _grad_modes() | _resets())
    writes = [bound_names(r.node, imports=False) if r.node is not None else set() for r in found]
    remade = next((i for i, r in enumerate(found) if not r.new), None)
    for index, rerun in enumerate(found):
        if rerun.node is None:
            problems.append(f"line {rerun.lineno}: DaiFu cannot read it")
            continue
        roots = [rerun.node] if rerun.whole else _header(rerun.node)
        later = set().union(*(written for written, r in zip(writes[index:], found[index:]) if not r.new))
        read = _exposed([rerun.node], set())[0] if rerun.whole else set().union(*map(_reads, roots))
        stale = sorted(read & later - before)
        if stale:
            problems.append(f"line {rerun.lineno} reads {', '.join(f'`{n}`' for n in stale)}, which the repeated "
                            "statements already changed")
        if rerun.new:
            before |= writes[index]
            continue
        for root in roots:
            problems += [f"line {rerun.lineno} {why}" for why in _effects(root, names, module, before, known)
                         if index != remade or not why.endswith((_DRAWS, _DROPOUT))]
        before |= writes[index]
    return list(dict.fromkeys(problems))


def _reads(root: ast.AST) -> set[str]:
    """The names `root` reads: loaded, or the target of an augmented assignment (`count += 1` reads `count`)."""
    return {n.id for n in _walk(root) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} | {
        n.target.id for n in _walk(root) if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)}


def _exposed(statements: list[ast.stmt], bound: set[str]) -> tuple[set[str], set[str]]:
    """The names `statements` read before they bind them themselves, in the order they run, and the names
    bound for certain after them (`bound`: those bound before). An `if` binds what each of its branches
    binds, a `with` what its body binds; any other compound statement is read whole (a loop's body reads
    what its previous pass bound, a handler runs after any statement of its `try`) and binds nothing for
    certain."""
    exposed: set[str] = set()
    for node in statements:
        if isinstance(node, ast.If):
            exposed |= _reads(node.test) - bound
            in_body, after_body = _exposed(node.body, bound)
            in_else, after_else = _exposed(node.orelse, bound)
            exposed |= in_body | in_else
            bound = bound | (after_body & after_else)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            exposed |= set().union(*(_reads(item.context_expr) for item in node.items)) - bound
            bound = bound | set().union(*(bound_names(item.optional_vars, imports=False) for item in node.items
                                          if item.optional_vars is not None))
            in_body, bound = _exposed(node.body, bound)
            exposed |= in_body
        elif isinstance(node, (*COMPOUND, ast.AsyncFor)):
            exposed |= _reads(node) - bound
        else:
            exposed |= _reads(node) - bound
            bound = bound | bound_names(node, imports=False)
    return exposed, bound


def _header(node: ast.stmt) -> list[ast.AST]:
    """The expressions a compound statement's header evaluates."""
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return [node.iter]
    if isinstance(node, (ast.If, ast.While)):
        return [node.test]
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [item.context_expr for item in node.items]
    return []


def _walk(root: ast.AST) -> Iterator[ast.AST]:
    """The nodes `root` evaluates where it runs: a lambda's or a nested function's body is not run there."""
    todo = [root]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not root:
            continue
        todo.extend(ast.iter_child_nodes(node))


@dataclass(frozen=True)
class _Known:
    """What is known to compute only, read once for a judgement: the numeric libraries' pure functions (by
    identity), the computing methods of tensors and arrays (by name), and the grad-mode context managers
    and the resets (by identity)."""

    pure: dict[int, str]
    methods: frozenset[str]
    modes: frozenset[int]


def _effects(root: ast.AST, names: Mapping[str, Any], module: Mapping[str, Any], fresh: set[str],
             known: _Known) -> Iterator[str]:
    for node in _walk(root):
        if isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, (ast.Store, ast.Del)):
            base = _root_name(node)
            if base not in fresh:
                yield f"writes into `{ast.unparse(node)}`"
        elif isinstance(node, (ast.Global, ast.Nonlocal, ast.Delete)):
            yield f"runs `{ast.unparse(node)}`"
        elif isinstance(node, ast.Call):
            why = _call(node, names, module, known)
            if why:
                yield why


def _call(call: ast.Call, names: Mapping[str, Any], module: Mapping[str, Any], known: _Known) -> str | None:
    """Why calling `call` again may change more than its result (`None`: it only computes)."""
    text = ast.unparse(call.func)
    function = call.func
    if isinstance(function, ast.Attribute) and _RANDOM.search(function.attr) or \
            isinstance(function, ast.Name) and _RANDOM.search(function.id):
        return f"calls `{text}`{_DRAWS}"
    value = _resolve(function, names, module)
    if value is not _MISSING:
        if isinstance(function, ast.Name) and value is getattr(builtins, function.id, None):
            return None if function.id in PURE_BUILTINS else f"calls `{text}`"
        if id(value) in known.pure or id(value) in known.modes:
            return None
        model = _model_effect(value)
        if model is not None:
            return f"calls `{text}` {model}" if model else None
    if isinstance(function, ast.Attribute):
        receiver = _resolve(function.value, names, module)
        model = _model_effect(receiver) if function.attr == "forward" else None
        if model is not None:
            return f"calls `{text}` {model}" if model else None
        if receiver is _MISSING or _is_array(receiver):  # a value the statement computes: a tensor's methods
            method = function.attr
            if method.endswith("_") and method in known.methods:
                return f"calls `{text}`, which changes `{ast.unparse(function.value)}` in place"
            if method in known.methods:
                return None
    return f"calls `{text}`, which DaiFu cannot tell only computes"


def _grad_modes() -> frozenset[int]:
    """The context managers that set autograd's or autocast's mode for a block (`CONTEXT_MANAGERS`), by
    identity: entering one again changes nothing but that mode, which the block leaves as it found it;
    and torch's constructors of a tensor from given values (`_CONSTRUCTORS`)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return frozenset()
    names = vars(torch)
    found = [path.split(".", 1)[1] for path in CONTEXT_MANAGERS] + list(_CONSTRUCTORS)
    return frozenset(id(names[name]) for name in found if name in names)


def _resets() -> frozenset[int]:
    """The functions of `RESETS` (`torch.optim.Optimizer.zero_grad`), by identity; none without torch."""
    if sys.modules.get("torch") is None:
        return frozenset()
    found = []
    for path in RESETS:
        value: Any = sys.modules.get(path.split(".", 1)[0])
        for part in path.split(".")[1:]:
            value = getattr(value, part, None)
        if value is not None:
            found.append(id(value))
    return frozenset(found)


def _resolve(node: ast.expr, names: Mapping[str, Any], module: Mapping[str, Any]) -> Any:
    """The live value of a name or a chain of module attributes, read from the namespaces without running
    any code (`_MISSING`: not such an expression, or not found)."""
    if isinstance(node, ast.Name):
        for scope in (names, module, vars(builtins)):
            if node.id in scope:
                return scope[node.id]
        return _MISSING
    if isinstance(node, ast.Attribute):
        owner = _resolve(node.value, names, module)
        if owner is _MISSING:
            return _MISSING
        if isinstance(owner, types.ModuleType):
            return vars(owner).get(node.attr, _MISSING)
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(owner, torch.nn.Module) and node.attr in owner._modules:
            return owner._modules[node.attr]
        try:
            found = inspect.getattr_static(owner, node.attr)
        except AttributeError:
            return _MISSING
        return _MISSING if isinstance(found, (property, types.MemberDescriptorType, types.GetSetDescriptorType)) \
            else found
    return _MISSING


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_array(value: Any) -> bool:
    torch, numpy = sys.modules.get("torch"), sys.modules.get("numpy")
    return (torch is not None and isinstance(value, torch.Tensor)) or (numpy is not None and
                                                                       isinstance(value, numpy.ndarray))


def _model_effect(value: Any) -> str | None:
    """For a model (`torch.nn.Module`): "" when calling it only computes, else what else it does; `None`
    for anything that is no model."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(value, torch.nn.Module):
        return None
    if not value.training:
        return ""
    for inner in value.modules():
        kind = type(inner).__name__
        if "Dropout" in kind or (isinstance(getattr(inner, "dropout", 0), float) and inner.dropout > 0):
            return _DROPOUT
        if getattr(inner, "track_running_stats", False) and getattr(inner, "momentum", 1) != 0:
            return "in training mode, which updates its batch statistics again"
    return ""
