"""The context of `daifu.allowlist`'s checks, read from a live crash without running user code.

Which names are modules (`F` is `torch.nn.functional`), which are allowlisted callables under another
name (`sleep`), what the function already calls and whether those callables are safe to call again
(judged by their live value: a `from os import system` never is), which names hold containers or
strings, and, for each user function on the stack, the same for a `patch_function`.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import functools
import inspect
import sys
import types
from collections.abc import Iterator, Mapping
from typing import Any

from daifu.decide.allowlist_check import import_meaning, is_exception_class, parse_code, root_name, text_of
from daifu.decide.allowlist_tables import BUILTINS, CALLS, CONTAINER_TYPES, DANGEROUS_MODULES, MODULE_ALIASES
from daifu.core.crash import Crash
from daifu.report.build import is_library


@dataclasses.dataclass(frozen=True)
class Context:
    """What the checked code may rely on, read from the crashed frame by `context_for`.

    source: the running source of the function (a surgery is compared with it).
    names: every local and global name visible there (they shadow builtins).
    modules: those names bound to modules, with the module's name (`F` -> `torch.nn.functional`).
    paths: those names bound to an allowlisted callable, with its path in `CALLS` (`sleep` -> `time.sleep`).
    callables: callees the function's own code calls (`model`, `optimizer.zero_grad`) whose live value
        is not from a dangerous module.
    containers, strings: names holding a list/dict/set, or a str.
    callees: for each user function on the crash's stack below the vaccinated one, the target a
        `patch_function` names it by (`sys.modules['m'].f`) and its own context.
    """

    source: str = ""
    names: frozenset[str] = frozenset()
    modules: Mapping[str, str] = dataclasses.field(default_factory=dict)
    paths: Mapping[str, str] = dataclasses.field(default_factory=dict)
    callables: frozenset[str] = frozenset()
    containers: frozenset[str] = frozenset()
    strings: frozenset[str] = frozenset()
    callees: Mapping[str, Context] = dataclasses.field(default_factory=dict)


def context_for(crash: Crash) -> Context:
    """The context of `crash`'s frame, and of every user function on the stack below it."""
    frame_globals = dict(crash.frame.f_globals) if crash.frame is not None else {}
    values = {**frame_globals, **crash.locals}
    context = build_context(crash.source, values, str(frame_globals.get("__name__", "")))
    callees = {}
    for frame in _callee_frames(crash):
        module = str(frame.f_globals.get("__name__"))
        target = f"sys.modules[{module!r}].{getattr(frame.f_code, 'co_qualname', frame.f_code.co_name)}"
        try:
            source = "".join(inspect.getsourcelines(frame.f_code)[0])
        except (OSError, TypeError):
            continue
        callees[target] = build_context(source, {**frame.f_globals, **frame.f_locals}, module)
    return dataclasses.replace(context, callees=callees)


def _callee_frames(crash: Crash) -> Iterator[types.FrameType]:
    """User frames below the vaccinated function's, where a `patch_function` could apply."""
    entries = [frame for frame, _ in _walk(crash.exception.__traceback__)]
    own = [
        i
        for i, f in enumerate(entries)
        if (f.f_code.co_filename, f.f_code.co_name) == (crash.filename, crash.function_name)
    ]
    for frame in entries[own[-1] + 1 :] if own else []:
        qualname = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
        if not _is_library(frame.f_code.co_filename) and "<locals>" not in qualname:
            yield frame


def _walk(tb: types.TracebackType | None) -> Iterator[tuple[types.FrameType, int]]:
    while tb is not None:
        yield tb.tb_frame, tb.tb_lineno
        tb = tb.tb_next


def build_context(source: str, values: Mapping[str, Any], module: str) -> Context:
    """The context of a function with this `source`, seeing `values` (its locals over its globals)."""
    modules = {name: _module_name(value) for name, value in values.items() if isinstance(value, types.ModuleType)}
    modules.update(_source_imports(source))
    allowlisted = _allowlisted_objects()
    callables = {text for text, value in _source_callees(source, values) if _admissible(value, module, allowlisted)}
    callables |= {name for name, value in values.items() if _named_callable(value, module, allowlisted)}
    paths = {name: allowlisted[id(v)] for name, v in values.items() if id(v) in allowlisted and callable(v)}
    return Context(
        source=source,
        paths=paths,
        names=frozenset(values),
        modules=modules,
        callables=frozenset(callables),
        containers=frozenset(n for n, v in values.items() if type(v) in CONTAINER_TYPES),
        strings=frozenset(n for n, v in values.items() if type(v) is str),
    )


def _allowlisted_objects() -> dict[int, str]:
    """The live objects of `CALLS` in modules already imported, by identity: a user's
    `from torch.nn.functional import relu` binds the allowlisted function, whatever its name."""
    found = {}
    for path in CALLS:
        module, _, name = path.rpartition(".")
        owner = sys.modules.get(module)
        value = owner.__dict__.get(name) if owner is not None else None
        if value is not None:
            found[id(value)] = path
    return found


def _named_callable(value: Any, module: str, allowlisted: Mapping[int, str]) -> bool:
    """Whether a name the frame sees may be called even if the function does not call it yet: a function
    or class the function's own module defines (an allowlisted callable under any name is in `paths`)."""
    defined_here = isinstance(value, (types.FunctionType, type)) and getattr(value, "__module__", None) == module
    return defined_here and _admissible(value, module, allowlisted)


def _module_name(module: types.ModuleType) -> str:
    name = module.__name__
    return MODULE_ALIASES.get(name, name)


def _source_imports(source: str) -> dict[str, str]:
    """Modules the function imports itself (`import numpy as np` in its body), by the names they bind."""
    tree = parse_code(source, "the function") if source else None
    found: dict[str, str] = {}
    if isinstance(tree, ast.Module):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(import_meaning(alias) for alias in node.names)
    return found


_MISSING = object()


def _source_callees(source: str, values: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """Each callee the source calls by a name or a dotted path on a name, with its live value if known."""
    tree = parse_code(source, "the function") if source else None
    if not isinstance(tree, ast.Module):
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and root_name(node.func) is not None:
            text = text_of(node.func)
            if not any(part.startswith("_") for part in text.split(".")[1:]):
                yield text, _resolve(text, values)


def _resolve(text: str, values: Mapping[str, Any]) -> Any:
    """The live value of a dotted callee, following attributes only through modules (no user code runs)."""
    root, *rest = text.split(".")
    value = values.get(root, builtins.__dict__.get(root, _MISSING))
    for part in rest:
        if not isinstance(value, types.ModuleType):
            return _METHOD_ON_VALUE if value is not _MISSING else _MISSING
        value = value.__dict__.get(part, _MISSING)
    return value


_METHOD_ON_VALUE = object()
"""A method called on a user's value (`optimizer.zero_grad`): admitted without looking it up."""


def _admissible(value: Any, module: str, allowlisted: Mapping[int, str]) -> bool:
    """Whether a callable the function calls may be called by bot code too (`Context.callables`)."""
    if value is _METHOD_ON_VALUE or value is _MISSING:
        return True  # a user's object's method, or a name the function binds before it calls it
    if id(value) in allowlisted:
        return True
    if isinstance(value, types.ModuleType):
        return False
    if isinstance(value, functools.partial):
        return _admissible(value.func, module, allowlisted)
    if isinstance(value, types.MethodType):
        return not isinstance(value.__self__, types.ModuleType) and _admissible(value.__func__, module, allowlisted)
    if isinstance(value, (types.FunctionType, type, types.BuiltinFunctionType)):
        return _admissible_definition(inspect.unwrap(value), module)  # `@torch.no_grad()` wraps it
    return _admissible_definition(type(value), module)  # a callable object: judged by its class


def _admissible_definition(value: Any, module: str) -> bool:
    owner = str(getattr(value, "__module__", None) or "")
    if owner == "builtins":
        return getattr(value, "__name__", "") in BUILTINS or is_exception_class(getattr(value, "__name__", ""))
    if any(owner == m or owner.startswith(m + ".") for m in DANGEROUS_MODULES):
        return False
    if owner == module or _is_torch_module_class(value):
        return True
    return not _is_library(_defined_in(value, owner))


_is_library = functools.lru_cache(maxsize=4096)(is_library)
"""`daifu.report.is_library`, remembered: it reads `sysconfig` on every call."""


def _defined_in(value: Any, owner: str) -> str:
    code = getattr(value, "__code__", None)
    if code is not None:
        return str(code.co_filename)
    return str(getattr(sys.modules.get(owner), "__file__", None) or "<unknown>")


def _is_torch_module_class(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, type) and issubclass(value, torch.nn.Module)
