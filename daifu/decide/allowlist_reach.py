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
- a method named as one of the system's (`.unlink()`, `.write_text()`, `.touch()`) or as a library's
  writer (`.save_pretrained(path)`, `.to_csv(path)`) or logger (`.add_scalar()`, `.log()`), unless on a
  name known to hold a list, dict or set and the name is a container's method;
- a function or method of the program whose own source, followed `DEPTH` calls deep, reaches it
  (what cannot be read or followed that far counts as reaching it).

An `Effect` names the call and the expressions that aim it: the file of a file function or a
writer (a checkpoint's tensors are the program's data, its path is not), the receiver of a logger
(its folder or server; the metrics are the program's), every argument and the receiver otherwise (a
command, a request's data).
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

from daifu.decide.allowlist_callables import (
    MISSING,
    is_module,
    is_system,
    namespace_of,
    program_function,
    static_attribute,
)
from daifu.decide.allowlist_system import (
    EFFECT_FUNCTIONS,
    FILE_FUNCTIONS,
    FILE_READERS,
    HARMLESS,
    LOG_METHODS,
    PATH_METHODS,
    in_system_module,
    system_attributes,
)
from daifu.decide.allowlist_tables import CONTAINER_METHODS, MODULE_ALIASES

DEPTH = 3
"""How many calls into the program's own functions are followed from a repair's call."""

_PATHS = frozenset({"path", "fname", "file", "filename", "save_directory", "dir", "repo_id", "f"})
"""Keywords by which the writers of `PATH_METHODS` take where they write."""

_PURE_MODULES = frozenset({"os.path"})
"""Modules inside `SYSTEM_MODULES` whose functions compute paths and read facts about them only."""


@dataclass(frozen=True)
class Effect:
    """A call that reaches the system: what it is, the expressions that aim it, and the way it gets there."""

    what: str
    targets: tuple[ast.expr, ...]
    through: str = ""
    reads: bool = False
    """It only reads a file (`torch.load(path)`, `open(path)`): aimed elsewhere, it reads other data."""


class Reach:
    """Judges the calls of code that runs with `namespace` (its globals, then its locals) as its names.

    modules: the names that code binds to modules, beside those `namespace` holds (`import os` inside
    a function). containers: names known to hold a list, dict or set.
    """

    def __init__(
        self,
        namespace: Mapping[str, Any],
        module: str,
        modules: Mapping[str, str] | None = None,
        containers: frozenset[str] = frozenset(),
        depth: int = DEPTH,
        seen: dict[int, str | None] | None = None,
    ) -> None:
        self.namespace = namespace
        self.module = module
        self.modules = dict(modules or {})
        self.containers = containers
        self.depth = depth
        self.seen: dict[int, str | None] = {} if seen is None else seen

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

    def function(self, function: types.FunctionType) -> str | None:
        """How the program's `function` reaches the system (`"torch.save(...) at helpers.py:12"`), or `None`."""
        key = id(function.__code__)
        if key in self.seen:
            return self.seen[key]
        if self.depth <= 0:
            return f"it calls functions more than {DEPTH} deep, too deep to follow"
        self.seen[key] = None  # a recursive call reaches nothing its first visit did not
        found = self._function(function)
        self.seen[key] = found
        return found

    def _function(self, function: types.FunctionType) -> str | None:
        try:
            lines, first = inspect.getsourcelines(function)
            tree = ast.parse(textwrap.dedent("".join(lines)))
        except Exception:  # noqa: BLE001 - a function whose source cannot be read cannot be cleared
            return f"the source of `{function.__qualname__}` cannot be read"
        inner = Reach(
            function.__globals__, str(function.__module__), _imports(tree), frozenset(), self.depth - 1, self.seen
        )
        filename = os.path.basename(function.__code__.co_filename)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                effect = inner.call(node)
                if effect is not None:
                    via = f" ({effect.through})" if effect.through else ""
                    return f"`{effect.what}` at {filename}:{first + node.lineno - 1}{via}"
        return None

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
            return Effect(text, _all_targets(node))
        loaded = _loaded(module)
        return self._value_effect(node, namespace_of(loaded).get(name, MISSING) if loaded else MISSING, text)

    def _name_effect(self, node: ast.Call, name: str, text: str) -> Effect | None:
        value = self.namespace.get(name, MISSING)
        if value is MISSING:
            if name in EFFECT_FUNCTIONS and name in builtins.__dict__:
                if name in FILE_FUNCTIONS:
                    return Effect(text, _file_targets(node, name), reads=_reads_only(node, name))
                return Effect(text, _all_targets(node))
            return None
        return self._value_effect(node, value, text)

    def _method_effect(self, node: ast.Call, func: ast.Attribute, text: str) -> Effect | None:
        name, receiver = func.attr, func.value
        if name in CONTAINER_METHODS and isinstance(receiver, ast.Name) and receiver.id in self.containers:
            return None
        if name in LOG_METHODS:
            return Effect(text, (receiver,))
        if name in PATH_METHODS:
            return Effect(text, (receiver, *node.args[:1], *(k.value for k in node.keywords if k.arg in _PATHS)))
        if name in system_attributes():
            return Effect(text, (receiver, *_all_targets(node)))
        if isinstance(receiver, ast.Name) and receiver.id in self.namespace:
            value = static_attribute(self.namespace[receiver.id], name)
            return self._value_effect(node, value, text, (receiver,))
        return None

    def _value_effect(
        self, node: ast.Call, value: Any, text: str, extra: tuple[ast.expr, ...] = ()
    ) -> Effect | None:
        if value is MISSING or not callable(value):
            return None
        file_path = _file_function_path(value)
        if file_path is not None:
            return Effect(text, _file_targets(node, file_path), reads=_reads_only(node, file_path))
        if is_system(value) and _text(node.func).rpartition(".")[2] not in HARMLESS:
            return Effect(text, (*extra, *_all_targets(node)))
        function = program_function(value, self.module)
        if function is None:
            return None
        found = self.function(function)
        if found is None:
            return None
        return Effect(text, (*extra, *_all_targets(node)), f"the program's `{function.__qualname__}` reaches {found}")


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
