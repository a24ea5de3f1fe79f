"""What the program's own code reaches: whether a call, or a function of the program, reaches the system.

Two checks rely on it. A repair may call the program's own functions — unless one reaches the system
(a helper that saves a checkpoint, deletes a file, posts to a server): the repair would aim the
program's effect at what it chooses. And the program's statements that reach the system are where the
names a repair binds must not flow (`daifu.decide.allowlist_flow`).

A call reaches the system when its callee, resolved with the live namespace of the code that makes
it and without running any of it, is:

- a callable of a system module (`os.remove`, `shutil.rmtree`, `subprocess.run`, `requests.post`)
  under any name (`from os import remove`), or a function that reads or writes a file (`torch.save`,
  `np.load`, `open`; `allowlist_system.FILE_FUNCTIONS`), but the path functions that only compute
  (`os.path.join`, `pathlib.Path(...)`);
- a builtin that runs or loads code or reads input (`exec`, `eval`, `__import__`, `input`);
- a method of a value the frame holds, by what its class defines there (a `Path`'s `.unlink()`; not a
  list's `.remove()`, a tensor's `.copy_()`; in a function of the program, not a method of a local it
  binds only to containers it builds, `no_decay = set()` then `no_decay.add(name)`); on any other
  receiver, a method named as one of the
  system's (`.unlink()`, `.write_text()`, `.touch()`) or as a library's writer (`.save_pretrained(path)`,
  `.to_csv(path)`) or logger (`.add_scalar()`, `.log()`);
- a function or method of the program whose own source, followed `DEPTH` calls deep, reaches it
  (what cannot be read or followed that far counts as reaching it).

An `Effect` names the call and the expressions that aim it: the file of a file function or a
writer (a checkpoint's tensors are the program's data, its path is not), the receiver of a logger or
of a file's `write` (its folder, server or file; the data is the program's), the arguments of a
function of the program bound to the parameters that aim what it reaches (followed inside it), every
argument and the receiver otherwise (a command, a request).
"""

from __future__ import annotations

import ast
import builtins
import inspect
import os
import sys
import textwrap
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from daifu.decide.allowlist_flow import Effect, aimed_effects
from daifu.decide.allowlist_callables import (
    MISSING,
    is_module,
    is_system,
    namespace_of,
    program_function,
    static_attribute,
)
from daifu.decide.allowlist_system import (
    CONTENT_METHODS,
    EFFECT_FUNCTIONS,
    FILE_FUNCTIONS,
    FILE_READERS,
    HARMLESS,
    INTROSPECTION,
    LOG_METHODS,
    PATH_METHODS,
    READ_METHODS,
    in_system_module,
    system_attributes,
)
from daifu.decide.allowlist_tables import MODULE_ALIASES, builds_container

DEPTH = 3
"""How many calls into the program's own functions are followed from a repair's call."""

_PATHS = frozenset({"path", "fname", "file", "filename", "save_directory", "dir", "repo_id", "f"})
"""Keywords by which the writers of `PATH_METHODS` take where they write."""

_PURE_MODULES = frozenset({"os.path"})
"""Modules inside `SYSTEM_MODULES` whose functions compute paths and read facts about them only."""

_VARIADIC = 0x04 | 0x08
"""`CO_VARARGS | CO_VARKEYWORDS`: a function taking `*args` or `**kwargs`."""


@dataclass(frozen=True)
class Summary:
    """What a function of the program reaches: how (`found`, `None` when nothing), and which of its
    parameters aim it (`aiming`; `None` when that cannot be told: every argument aims it)."""

    found: str | None
    aiming: frozenset[str] | None = None
    reads: bool = False
    """What its parameters aim, it only reads (`tokenize(path)` opening `path` to read it)."""
    severe: bool = True
    """It reaches more than reading, writing a file or logging (`Effect.severe`)."""


class Reach:
    """Judges the calls of code that runs with `namespace` (its globals, then its locals) as its names.

    modules: the names that code binds to modules, beside those `namespace` holds (`import os` inside
    a function).
    """

    def __init__(
        self,
        namespace: Mapping[str, Any],
        module: str,
        modules: Mapping[str, str] | None = None,
        depth: int = DEPTH,
        seen: dict[int, Summary] | None = None,
        containers: frozenset[str] = frozenset(),
    ) -> None:
        self.namespace = namespace
        self.module = module
        self.modules = dict(modules or {})
        self.depth = depth
        self.seen: dict[int, Summary] = {} if seen is None else seen
        self.containers = containers
        """Locals of the code judged that hold only containers it built (`made_containers`)."""

    def call(self, node: ast.Call) -> Effect | None:
        """The effect of `node`, if its callee reaches the system."""
        func = node.func
        text = _text(func)
        path = self._module_path(func)
        if path is not None:
            return self._path_effect(node, path, text)
        if isinstance(func, ast.Name):
            return self._name_effect(node, func.id, text)
        if isinstance(func, ast.Attribute):
            return self._method_effect(node, func, text)
        return None

    def function(self, function: types.FunctionType) -> Summary:
        """What the program's `function` reaches, and which of its parameters aim it."""
        key = id(function.__code__)
        if key in self.seen:
            return self.seen[key]
        if self.depth <= 0:
            return Summary(f"calls more than {DEPTH} deep, too deep to follow")  # severe: cannot tell
        self.seen[key] = Summary(None)  # a recursive call reaches nothing its first visit did not
        found = self._function(function)
        self.seen[key] = found
        return found

    def _function(self, function: types.FunctionType) -> Summary:
        try:
            lines, first = inspect.getsourcelines(function)
            tree = ast.parse(textwrap.dedent("".join(lines)))
        except Exception:  # noqa: BLE001 - a function whose source cannot be read cannot be cleared
            return Summary(f"the source of `{function.__qualname__}`, which cannot be read")
        modules = _imports(tree)
        inner = Reach(function.__globals__, str(function.__module__), modules, self.depth - 1, self.seen,
                      made_containers(tree))
        filename = os.path.basename(function.__code__.co_filename)
        found, severe = None, False
        for node in ast.walk(tree):
            effect = inner.call(node) if isinstance(node, ast.Call) else None
            if effect is not None and isinstance(node, ast.Call):
                via = f" ({effect.through})" if effect.through else ""
                found = found or f"`{effect.what}` at {filename}:{first + node.lineno - 1}{via}"
                severe = severe or effect.severe
        if found is None:
            return Summary(None)
        if function.__code__.co_flags & _VARIADIC:
            return Summary(found, severe=severe)
        names = frozenset(modules) | {n for n, v in function.__globals__.items() if is_module(v)}
        aimed = {
            parameter: aimed_effects(tree, [], inner.call, frozenset(), names, frozenset({parameter}))
            for parameter in _parameters(function)
        }
        reads = all(effect.reads for effects in aimed.values() for effect in effects)
        return Summary(found, frozenset(p for p, effects in aimed.items() if effects), reads, severe)

    # -- callees

    def _module_path(self, node: ast.expr) -> str | None:
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or not parts:
            return None
        module = self.modules.get(node.id)
        if module is None:
            value = self.namespace.get(node.id, MISSING)
            if not is_module(value):
                return None
            name = namespace_of(value).get("__name__")
            module = MODULE_ALIASES.get(name, name) if isinstance(name, str) else "?"
        return ".".join([module, *reversed(parts)])

    def _path_effect(self, node: ast.Call, path: str, text: str) -> Effect | None:
        module, _, name = path.rpartition(".")
        if path in FILE_FUNCTIONS:
            return Effect(text, _file_targets(node, path), reads=_reads_only(node, path))
        if in_system_module(module) and module not in _PURE_MODULES and name not in HARMLESS:
            if name in LOG_METHODS:  # `wandb.log(metrics)`: aimed where it was set up
                return Effect(text, ())
            return Effect(text, _all_targets(node), severe=True)
        loaded = _loaded(module)
        return self._value_effect(node, namespace_of(loaded).get(name, MISSING) if loaded else MISSING, text)

    def _name_effect(self, node: ast.Call, name: str, text: str) -> Effect | None:
        value = self.namespace.get(name, MISSING)
        if value is MISSING:
            if name in EFFECT_FUNCTIONS and name in builtins.__dict__:
                if name in FILE_FUNCTIONS:
                    return Effect(text, _file_targets(node, name), reads=_reads_only(node, name))
                return Effect(text, _all_targets(node), severe=True)
            return None
        return self._value_effect(node, value, text)

    def _method_effect(self, node: ast.Call, func: ast.Attribute, text: str) -> Effect | None:
        name, receiver = func.attr, func.value
        if isinstance(receiver, ast.Constant):
            return None  # `'loss {}'.format(loss)`: a literal's method
        if isinstance(receiver, ast.Name) and receiver.id in self.containers:
            return None  # a list, dict or set the function built: its methods change only that container
        held = self.namespace.get(receiver.id, MISSING) if isinstance(receiver, ast.Name) else MISSING
        if held is not MISSING and not is_system(type(held)):
            return self._value_effect(node, static_attribute(held, name), text, receiver)  # its class says
        if name in LOG_METHODS or name in CONTENT_METHODS:
            return Effect(text, (receiver,))
        if name in READ_METHODS:
            return Effect(text, (receiver,), reads=True)
        if name in PATH_METHODS:
            return Effect(text, (receiver, *node.args[:1], *(k.value for k in node.keywords if k.arg in _PATHS)))
        if name in system_attributes() and name not in INTROSPECTION:
            return Effect(text, (receiver, *_all_targets(node)), severe=True)
        return None

    def _value_effect(self, node: ast.Call, value: Any, text: str, receiver: ast.expr | None = None) -> Effect | None:
        if value is MISSING or not callable(value):
            return None
        file_path = _file_function_path(value)
        if file_path is not None:
            return Effect(text, _file_targets(node, file_path), reads=_reads_only(node, file_path))
        if is_system(value) and _text(node.func).rpartition(".")[2] not in HARMLESS:
            return Effect(text, (*([receiver] if receiver else []), *_all_targets(node)), severe=True)
        function = program_function(value, self.module)
        if function is None:
            return None
        summary = self.function(function)
        if summary.found is None:
            return None
        bound = type(value) is types.MethodType
        targets = _aiming_arguments(node, function, summary.aiming, receiver if bound else None)
        return Effect(text, targets, f"which reaches {summary.found}", reads=summary.reads and bool(summary.aiming),
                      severe=summary.severe)


def made_containers(tree: ast.AST) -> frozenset[str]:
    """The names `tree` (a function's source) binds only by assigning a container it builds (`[]`, `{}`,
    `set()`, a comprehension): every other way of binding a name (a parameter, a loop, `with`, an unpacking,
    a call's result, `global`) leaves it out."""
    built: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and builds_container(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            built.update(id(target) for target in targets if isinstance(target, ast.Name))
    stored: dict[str, bool] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            stored[node.id] = stored.get(node.id, True) and id(node) in built
        elif isinstance(node, ast.arg):
            stored[node.arg] = False
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            stored.update(dict.fromkeys(node.names, False))
    return frozenset(name for name, only_built in stored.items() if only_built)


def _parameters(function: types.FunctionType) -> tuple[str, ...]:
    code = function.__code__
    return code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]


def _aiming_arguments(
    node: ast.Call, function: types.FunctionType, aiming: frozenset[str] | None, receiver: ast.expr | None
) -> tuple[ast.expr, ...]:
    """The arguments of a call of the program's `function` bound to a parameter that aims what it reaches
    (all of them when that cannot be told), and the receiver when `self` aims it."""
    every = (*([receiver] if receiver is not None else []), *_all_targets(node))
    unpacked = any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords)
    if aiming is None or unpacked:
        return every
    positional = list(_parameters(function)[: function.__code__.co_argcount])
    found: list[ast.expr] = []
    if receiver is not None and positional and positional.pop(0) in aiming:
        found.append(receiver)
    found += [argument for name, argument in zip(positional, node.args) if name in aiming]
    found += [k.value for k in node.keywords if k.arg in aiming]
    return tuple(found)


def _loaded(module: str) -> types.ModuleType | None:
    found = sys.modules.get(module)
    return found if isinstance(found, types.ModuleType) else None


def _file_function_path(value: Any) -> str | None:
    """The path in `FILE_FUNCTIONS` of `value`, when it is one of them (`from torch import save`)."""
    for path in FILE_FUNCTIONS:
        module, _, name = path.rpartition(".")
        owner = _loaded(module) if module else None
        known = namespace_of(owner).get(name, MISSING) if owner is not None else builtins.__dict__.get(name, MISSING)
        if known is value:
            return path
    return None


def _reads_only(node: ast.Call, path: str) -> bool:
    """Whether the file call only reads: a reader, or `open` whose mode is a literal without w, a, x, +."""
    if path in FILE_READERS:
        return True
    if path != "open":
        return False
    modes = [*node.args[1:2], *(k.value for k in node.keywords if k.arg == "mode")]
    if not modes:
        return True
    mode = modes[0]
    return isinstance(mode, ast.Constant) and isinstance(mode.value, str) and not set(mode.value) & set("wax+")


def _file_targets(node: ast.Call, path: str) -> tuple[ast.expr, ...]:
    position, keyword = FILE_FUNCTIONS[path]
    found = [node.args[position]] if len(node.args) > position else []
    found += [k.value for k in node.keywords if k.arg == keyword]
    return tuple(found) or _all_targets(node)


def _all_targets(node: ast.Call) -> tuple[ast.expr, ...]:
    return (*node.args, *(k.value for k in node.keywords))


def _imports(tree: ast.AST) -> dict[str, str]:
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                found[alias.asname or top] = alias.name if alias.asname else top
    return found


def _text(node: ast.AST) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # noqa: BLE001 - a node too odd to print is named by its kind
        text = type(node).__name__
    return text if len(text) <= 80 else text[:77] + "..."
