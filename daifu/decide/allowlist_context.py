"""The context of `daifu.decide.allowlist`'s checks, read from a live crash without running user code.

Which names are modules (`F` is `torch.nn.functional`), which stand for an admitted callable under
another name (`med` for `numpy.median`, `sleep` for `time.sleep`), what the function already calls and
whether a repair may call it too (judged by the live object, `daifu.decide.allowlist_callables`: a
`from os import system` never may), which names hold a callable a repair may not even hand on as a
value, which hold containers, strings, tensors or arrays, and, for each user function on the stack,
the same for a `patch_function`.

Building a context is total: whatever the program holds, it answers (a value whose kind cannot be
told is refused), and it reads attributes only where no code of the program runs.
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

from daifu.core.crash import Crash
from daifu.decide.allowlist_callables import (
    DATA,
    MISSING,
    Sentinel,
    Judge,
    is_module,
    is_program_own,
    namespace_of,
    refusal,
    static_attribute,
)
from daifu.decide.allowlist_check import import_meaning, parse_code, root_name, text_of
from daifu.decide.allowlist_numeric import pure_objects, tensor_methods
from daifu.decide.allowlist_system import system_attributes
from daifu.decide.allowlist_tables import CALLS, CONTAINER_TYPES, MODULE_ALIASES
from daifu.decide.made_calls import made_calls
from daifu.report.build import is_library


@dataclasses.dataclass(frozen=True)
class Context:
    """What the checked code may rely on, read from the crashed frame by `context_for`.

    source: the running source of the function (a surgery is compared with it), whose first line is
        line `first_lineno` of its file: the lines a message names are the file's.
    names: every local and global name visible there (they shadow builtins).
    modules: those names bound to modules, with the module's name (`F` -> `torch.nn.functional`).
    paths: those names bound to an admitted callable, with its path (`sleep` -> `time.sleep`).
    callables: callees the function's own code calls (`model`, `optimizer.zero_grad`, `np.median`)
        that a repair may call too: their live object is not the system's.
    refused: names holding a callable a repair may not reach, even as a value, with the reason.
    containers, strings, arrays: names holding a list/dict/set, a str, or a tensor/array.
    pure: the pure functions of the numeric libraries, by identity, with their paths.
    methods: the pure methods of tensors and arrays, by name (those the system's types share a name
        with, `copy`, `add`, are admitted only on a name known to hold a tensor or array).
    callees: for each user function on the crash's stack below the vaccinated one, the target a
        `patch_function` names it by (`sys.modules['m'].f`) and its own context.
    made_calls: the calls the crashed statement made that a repair may make again with the same arguments
        (`ast.dump` of each; `daifu.decide.made_calls`), whatever they reach.
    values: the names the frame sees with their live values, looked into only where no code runs.
    module: the name of the function's module (what is defined there is the program's own).
    """

    source: str = ""
    first_lineno: int = 1
    names: frozenset[str] = frozenset()
    modules: Mapping[str, str] = dataclasses.field(default_factory=dict)
    paths: Mapping[str, str] = dataclasses.field(default_factory=dict)
    callables: frozenset[str] = frozenset()
    refused: Mapping[str, str] = dataclasses.field(default_factory=dict)
    containers: frozenset[str] = frozenset()
    strings: frozenset[str] = frozenset()
    arrays: frozenset[str] = frozenset()
    pure: Mapping[int, str] = dataclasses.field(default_factory=dict, repr=False)
    methods: frozenset[str] = dataclasses.field(default_factory=frozenset, repr=False)
    callees: Mapping[str, Context] = dataclasses.field(default_factory=dict)
    made_calls: frozenset[str] = frozenset()
    values: Mapping[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)
    module: str = ""

    def admits(self, path: str) -> bool:
        """Whether the dotted `path` (`numpy.median`) is a callable a repair may call: in `CALLS`, or
        a pure function of the numeric libraries (judged by the live object at that path)."""
        if path in CALLS:
            return True
        value = _at_path(path)
        return value is not _MISSING and id(value) in self.pure

    def value_of(self, text: str) -> Any:
        """The live object a dotted name (`save_snapshot`, `snapshotter.take`) stands for in the frame,
        looked up without running the program's code; a sentinel where it cannot be."""
        return _resolve(text, self.values)

    def look_up(self, root: str, attributes: list[str]) -> tuple[bool, str | None]:
        """Whether `root.a.b` (attributes of a frame name, read as a value) could be looked up without
        running the program's code, and why it may not be handed on when it is a callable a repair may
        not reach (`(True, None)`: data, or an admitted callable; `(False, None)`: not known)."""
        value = self.values.get(root, _MISSING)
        for name in attributes:
            if value is _MISSING or value is _DATA:
                return False, None
            value = static_attribute(value, name)
        if value is _MISSING or value is _DATA:
            return False, None
        if not callable(value):
            return True, None
        return True, refusal(value, Judge(self.module, self.pure, self.methods, called=False))


def context_for(crash: Crash) -> Context:
    """The context of `crash`'s frame, and of every user function on the stack below it."""
    frame_globals = dict(crash.frame.f_globals) if crash.frame is not None else {}
    values = {**frame_globals, **crash.locals}
    module = frame_globals.get("__name__")
    context = build_context(crash.source, values, module if isinstance(module, str) else "", crash.first_lineno)
    callees = {}
    for frame in _callee_frames(crash):
        name = frame.f_globals.get("__name__")
        target = f"sys.modules[{name!r}].{getattr(frame.f_code, 'co_qualname', frame.f_code.co_name)}"
        try:
            lines, first = inspect.getsourcelines(frame.f_code)
        except Exception:  # noqa: BLE001 - no source to read: nothing a patch could be checked against
            continue
        callees[target] = build_context(
            "".join(lines), {**frame.f_globals, **frame.f_locals}, name if isinstance(name, str) else "", first
        )
    return dataclasses.replace(context, callees=callees, made_calls=made_calls(crash))


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
        if not is_library(frame.f_code.co_filename) and "<locals>" not in qualname:
            yield frame


def _walk(tb: types.TracebackType | None) -> Iterator[tuple[types.FrameType, int]]:
    while tb is not None:
        yield tb.tb_frame, tb.tb_lineno
        tb = tb.tb_next


def build_context(source: str, values: Mapping[str, Any], module: str, first_lineno: int = 1) -> Context:
    """The context of a function with this `source` (starting at file line `first_lineno`), seeing
    `values` (its locals over its globals), defined in the module named `module`."""
    pure = pure_objects()
    methods = tensor_methods()
    allowlisted = {**_allowlisted_objects(), **pure}
    modules = {name: _module_name(value) for name, value in values.items() if is_module(value)}
    modules.update(_source_imports(source))
    calls = list(_source_callees(source, values))
    called = {text for text, _ in calls}
    judge = Judge(module, pure, methods, called=True)
    callables = {text for text, value in calls if _may_call_again(text, value, judge)}
    callables |= {name for name, value in values.items() if is_program_own(value, module)}
    refused = {}
    for name, value in values.items():
        if callable(value) and id(value) not in allowlisted:
            reason = refusal(value, Judge(module, pure, methods, called=name in called))
            if reason is not None:
                refused[name] = reason
    return Context(
        source=source,
        first_lineno=first_lineno,
        names=frozenset(values),
        modules=modules,
        paths={name: allowlisted[id(v)] for name, v in values.items() if id(v) in allowlisted and callable(v)},
        callables=frozenset(callables),
        refused=refused,
        containers=frozenset(n for n, v in values.items() if type(v) in CONTAINER_TYPES),
        strings=frozenset(n for n, v in values.items() if type(v) is str),
        arrays=frozenset(n for n, v in values.items() if _is_array(v)),
        pure=pure,
        methods=methods,
        values=dict(values),
        module=module,
    )


def _may_call_again(text: str, value: Any, judge: Judge) -> bool:
    """Whether a repair may call what the function calls as `text` (whose live object is `value`)."""
    if text.rpartition(".")[2] in system_attributes() and "." in text:
        return False  # `f.write`, `path.unlink`: the program's own call, but the system's method
    if value is _MISSING or value is _UNKNOWN:
        return True  # bound by the function before it calls it, or a method its own objects look up
    return refusal(value, judge) is None


def _allowlisted_objects() -> dict[int, str]:
    """The live objects of `CALLS` in modules already imported, by identity: a user's
    `from torch.nn.functional import relu` binds the allowlisted function, whatever its name."""
    found = {}
    for path in CALLS:
        value = _at_path(path)
        if value is not _MISSING:
            found[id(value)] = path
    return found


def _at_path(path: str) -> Any:
    """The object at a dotted path in a module already imported, read from its namespace."""
    module, _, name = path.rpartition(".")
    owner = sys.modules.get(module)
    if owner is None:
        return _MISSING
    return namespace_of(owner).get(name, _MISSING)


def _is_array(value: Any) -> bool:
    torch, numpy = sys.modules.get("torch"), sys.modules.get("numpy")
    kinds = [getattr(torch, "Tensor", None), getattr(numpy, "ndarray", None)]
    return any(isinstance(kind, type) and issubclass(type(value), kind) for kind in kinds)


def _module_name(module: types.ModuleType) -> str:
    name = namespace_of(module).get("__name__")
    name = name if isinstance(name, str) else "?"
    return MODULE_ALIASES.get(name, name)


def _source_imports(source: str) -> dict[str, str]:
    """Modules the function imports itself (`import numpy as np` in its body), by the names they bind."""
    return dict(_read_source(source)[0])


def _source_callees(source: str, values: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """Each callee the source calls by a name or a dotted path on a name, with its live value if known."""
    for text in _read_source(source)[1]:
        yield text, _resolve(text, values)


@functools.lru_cache(maxsize=64)
def _read_source(source: str) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """What `source` alone says: the modules it imports (`_source_imports`) and the dotted callees it
    calls (`_source_callees`), in order. Kept per source: a repeat of a crash parsed it again otherwise."""
    tree = parse_code(source, "the function") if source else None
    imports: dict[str, str] = {}
    callees: list[str] = []
    if isinstance(tree, ast.Module):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imports.update(import_meaning(alias) for alias in node.names)
            elif isinstance(node, ast.Call) and root_name(node.func) is not None:
                text = text_of(node.func)
                if not any(part.startswith("_") for part in text.split(".")[1:]):
                    callees.append(text)
    return tuple(imports.items()), tuple(callees)


_MISSING = MISSING
_DATA = DATA
_UNKNOWN = Sentinel("<unknown>")
"""An attribute that cannot be looked up without running the program's code (`model.fc1`)."""


def _resolve(text: str, values: Mapping[str, Any]) -> Any:
    """The live value of a dotted callee, its attributes looked up without running the program's code."""
    root, *rest = text.split(".")
    value = values.get(root, builtins.__dict__.get(root, _MISSING))
    for part in rest:
        if value is _MISSING:
            return _MISSING
        value = static_attribute(value, part)
        if value is _MISSING or value is _DATA:
            return _UNKNOWN
    return value
