"""Which live callables a repair may reach: judged by what the object is, never by running its code.

`refusal(value, judge)` says why a repair may not call `value`, or hand it to something that calls it
(`map(f, xs)`, `max(key=f)`, `DataLoader(collate_fn=f)`), or `None` when it may. Admitted are:

- the pure functions and types of the numeric libraries (`daifu.decide.allowlist_numeric`);
- the builtins of `BUILTINS` and the builtin exception classes;
- the program's own functions and classes: defined in its module, or in a file that is no library's;
- layers (`torch.nn.Module` subclasses, their instances, their methods);
- any other library callable the vaccinated function already calls (`Judge.called`), resolved to the
  same object: doing again what the program does is not a new kind of reach;
- a library's class, as a value (`isinstance(batch, BatchEncoding)`): whether it may be called is
  the call's question (`Context.callables`), not the value's.

Refused, whatever else holds: anything defined in one of `SYSTEM_MODULES` (`os.remove` under any name,
a `pathlib.Path` method, `logging`), a module itself, and any object whose kind cannot be told.

Every attribute is read from the C-level slots of functions, types, methods and partials, so no
`__getattr__`, property or metaclass of the program runs; whatever a value is, the answer is a
judgement, never an exception. The same holds for the other questions asked of live values here:
`is_system` (is it the system's, under whatever name), `is_program_own`, `program_function` (the
program's function behind a bound method or a partial, whose source can be read), and
`static_attribute` (`value.name` looked up without running anything).
"""

from __future__ import annotations

import functools
import sys
import types
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any

from daifu.decide.allowlist_system import in_system_module
from daifu.decide.allowlist_tables import BUILTINS
from daifu.report.build import is_library

_DEPTH = 8
"""How many wrappers (`functools.partial`, `__wrapped__`, bound methods) are followed to the callable inside."""

_SLOT_MODULE = type.__dict__["__module__"]
_SLOT_NAME = type.__dict__["__name__"]


@dataclass(frozen=True)
class Judge:
    """What a judgement needs beside the value: the crashed function's module name, the pure objects
    of the numeric libraries by identity, and whether the function itself calls the value."""

    module: str
    pure: Mapping[int, str] = field(default_factory=dict)
    methods: frozenset[str] = frozenset()
    """The pure methods of tensors and arrays (`allowlist_numeric.tensor_methods`)."""
    called: bool = False


def refusal(value: Any, judge: Judge) -> str | None:
    """Why a repair may not reach `value`, or `None` when it may; never raises."""
    try:
        return _refusal(value, judge, 0)
    except Exception as error:  # noqa: BLE001 - a value too odd to tell is refused, never a crash of DaiFu
        return f"what it is cannot be told ({type(error).__name__})"


def _refusal(value: Any, judge: Judge, depth: int) -> str | None:
    if id(value) in judge.pure:
        return None
    if depth > _DEPTH:
        return "it is wrapped too deeply to tell what it calls"
    kind = type(value)
    if issubclass(kind, types.ModuleType):
        return "it is a module"
    if kind is functools.partial:
        return _refusal(value.func, judge, depth + 1)
    if kind is types.MethodType:
        return _method_refusal(value.__self__, value.__func__, judge, depth)
    if kind is types.BuiltinFunctionType:
        owner = value.__self__
        if owner is None or isinstance(owner, types.ModuleType):
            return _defined_refusal(value, _text(value.__module__), None, judge)
        return _c_method_refusal(type(owner), _text(value.__name__), judge)
    if kind in _UNBOUND_C_METHODS:
        return _c_method_refusal(value.__objclass__, _text(value.__name__), judge)
    if kind is types.MethodWrapperType:
        return _c_method_refusal(type(value.__self__), _text(value.__name__), judge)
    if kind is types.FunctionType:
        inner = value.__dict__.get("__wrapped__")
        if inner is not None and inner is not value:  # `@torch.no_grad()`, `functools.wraps`: judge what it wraps
            return _refusal(inner, judge, depth + 1)
        return _defined_refusal(value, _text(value.__module__), value.__code__.co_filename, judge)
    if issubclass(kind, type):
        return _class_refusal(value, judge)
    if not callable(value):
        return None  # data: reading it reaches nothing
    if _is_layer_class(kind):
        return None
    return _class_refusal(kind, judge, instance=True)


def is_system(value: Any) -> bool:
    """Whether `value` is a callable that one of `SYSTEM_MODULES` defines, under whatever name the
    program holds it (`from os import remove`, a bound `Path.unlink`); an object too odd to tell is."""
    try:
        return _is_system(value, 0)
    except Exception:  # noqa: BLE001 - what cannot be told is taken for the system
        return True


def _is_system(value: Any, depth: int) -> bool:
    kind = type(value)
    if depth > _DEPTH:
        return True
    if kind is functools.partial:
        return _is_system(value.func, depth + 1)
    if kind is types.MethodType:
        return _is_system_class(type(value.__self__)) or _is_system(value.__func__, depth + 1)
    if kind is types.BuiltinFunctionType:
        owner = value.__self__
        if owner is None or isinstance(owner, types.ModuleType):
            module = _text(value.__module__)
            if module == "builtins":  # `open`, `exec`, `getattr` are; `len`, `print`, `sorted` are not
                return _text(value.__name__) not in BUILTINS
            return in_system_module(module)
        return _is_system_class(type(owner))
    if kind in _UNBOUND_C_METHODS:
        return _is_system_class(value.__objclass__)
    if kind is types.MethodWrapperType:
        return _is_system_class(type(value.__self__))
    if kind is types.FunctionType:
        inner = value.__dict__.get("__wrapped__")
        if inner is not None and inner is not value:
            return _is_system(inner, depth + 1)
        return in_system_module(_text(value.__module__))
    if issubclass(kind, type):
        return _is_system_class(value)
    return callable(value) and _is_system_class(kind)


def _is_system_class(klass: type) -> bool:
    """Whether a system module defines `klass`; the builtin types (`list`, `dict`, `str`) are values."""
    owner = _text(_SLOT_MODULE.__get__(klass, type))
    return owner != "builtins" and in_system_module(owner)


def program_function(value: Any, module: str) -> types.FunctionType | None:
    """The program's own Python function behind a callable (a function, a bound method, a partial),
    whose source can be read; `None` for anything else. Never raises."""
    try:
        for _ in range(_DEPTH):
            kind = type(value)
            if kind is functools.partial:
                value = value.func
            elif kind is types.MethodType:
                value = value.__func__
            elif kind is types.FunctionType:
                return value if is_program_own(value, module) else None
            else:
                return None
    except Exception:  # noqa: BLE001 - a value too odd to look into has no source to read
        return None
    return None


def is_program_own(value: Any, module: str) -> bool:
    """Whether `value` is a function or class the program defines: in the crashed function's module
    `module`, or in a file that is no library's (DaiFu's own are a library's, wherever installed).
    Never raises."""
    try:
        kind = type(value)
        if kind is types.FunctionType:
            owner, filename = value.__module__, value.__code__.co_filename
        elif issubclass(kind, type):
            owner = _SLOT_MODULE.__get__(value, type)
            filename = _module_file(sys.modules.get(owner)) if isinstance(owner, str) else None
        else:
            return False
        if not isinstance(owner, str) or owner == "daifu" or owner.startswith(("daifu.", "repairbot")):
            return False
        return owner == module or (isinstance(filename, str) and not _is_library(filename))
    except Exception:  # noqa: BLE001 - a value too odd to tell is not the program's own
        return False


def _method_refusal(owner: Any, function: Any, judge: Judge, depth: int) -> str | None:
    """A method bound to `owner`: refused with its class when that class is the system's."""
    klass = type(owner)
    if in_system_module(_text(_SLOT_MODULE.__get__(klass, type))):
        return f"it is a method of {_class_name(klass)}, which reaches the system"
    if _is_layer_class(klass):
        return None
    return _refusal(function, judge, depth + 1)


_UNBOUND_C_METHODS = (types.MethodDescriptorType, types.WrapperDescriptorType, types.ClassMethodDescriptorType)
_STR_INTROSPECTION = frozenset({"format", "format_map"})
"""`str` methods that read attributes of their arguments (`'{0.__globals__}'.format(f)`)."""


def _c_method_refusal(klass: type, name: str, judge: Judge) -> str | None:
    """A method written in C (`tensor.add`, `str.lower`, `ndarray.sum`), judged by its class and name."""
    owner = _text(_SLOT_MODULE.__get__(klass, type))
    if in_system_module(owner):
        return f"it is the method `.{name}` of {_class_name(klass)}, which reaches the system"
    if _is_layer_class(klass):
        return None
    if owner == "builtins":
        if _text(_SLOT_NAME.__get__(klass, type)) in BUILTINS and name not in _STR_INTROSPECTION:
            return None
        return f"it is the method `.{name}` of the builtin {_text(_SLOT_NAME.__get__(klass, type))}"
    if _is_array_class(klass):
        return None if name in judge.methods else f"`.{name}` of a tensor or array is not pure computation"
    return _class_refusal(klass, judge, instance=True)


def _class_refusal(klass: type, judge: Judge, instance: bool = False) -> str | None:
    owner = _text(_SLOT_MODULE.__get__(klass, type))
    name = _text(_SLOT_NAME.__get__(klass, type))
    if owner == "builtins":
        if name in BUILTINS or (issubclass(klass, BaseException) and not instance):
            return None
        return f"the builtin `{name}` is not on the allowlist"
    if _is_layer_class(klass):
        return None
    if not instance and not in_system_module(owner):
        return None  # a library's class as a value (`isinstance`); calling it is judged as a call, elsewhere
    module = sys.modules.get(owner)
    return _defined_refusal(klass, owner, _module_file(module), judge, what="an object of " if instance else "")


def _defined_refusal(value: Any, owner: str, filename: str | None, judge: Judge, what: str = "") -> str | None:
    """A function or class defined in module `owner` (file `filename`): the program's, a library's, the system's."""
    name = getattr(value, "__qualname__", None) if isinstance(value, types.FunctionType) else None
    shown = f"{what}{owner}.{name}" if isinstance(name, str) else f"{what}{owner or 'an unknown module'}"
    if owner == "builtins":
        builtin = _text(getattr(value, "__name__", "")) if isinstance(value, types.BuiltinFunctionType) else ""
        return None if builtin in BUILTINS else f"the builtin `{builtin or shown}` is not on the allowlist"
    if in_system_module(owner):
        return f"it is {shown}, which reaches the system"
    if owner == judge.module or (filename is not None and not _is_library(filename)):
        return None  # the program's own
    if judge.called:
        return None  # a library's callable the function already calls: the same object, called again
    return f"it is {shown}, a library's callable the function does not call"


def _is_layer_class(klass: type) -> bool:
    torch = sys.modules.get("torch")
    module = getattr(getattr(torch, "nn", None), "Module", None)
    return isinstance(module, type) and issubclass(klass, module)


def _is_array_class(klass: type) -> bool:
    torch, numpy = sys.modules.get("torch"), sys.modules.get("numpy")
    kinds = [getattr(getattr(torch, "_C", None), "TensorBase", None), getattr(numpy, "ndarray", None)]
    return any(isinstance(kind, type) and issubclass(klass, kind) for kind in kinds)


def _module_file(module: Any) -> str | None:
    if not isinstance(module, types.ModuleType):
        return None
    filename = namespace_of(module).get("__file__")
    return filename if isinstance(filename, str) else None


def _class_name(klass: type) -> str:
    return f"{_text(_SLOT_MODULE.__get__(klass, type))}.{_text(_SLOT_NAME.__get__(klass, type))}"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


_is_library = functools.lru_cache(maxsize=4096)(is_library)
"""`daifu.report.is_library`, remembered: it reads `sysconfig` on every call."""


class Sentinel:
    """A marker no value of the program can be."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


MISSING = Sentinel("<missing>")
"""What a static look-up cannot find: a name nothing binds yet, an attribute it cannot tell."""
DATA = Sentinel("<data>")
"""An attribute a property or a slot of the object computes or holds: data, whose value is not read."""


def is_module(value: Any) -> bool:
    return issubclass(type(value), types.ModuleType)


def namespace_of(module: types.ModuleType) -> dict[str, Any]:
    """A module's own namespace, whatever its class does with attribute lookups (lazy modules)."""
    try:
        namespace = object.__getattribute__(module, "__dict__")
    except Exception:  # noqa: BLE001 - a module that hides its namespace offers nothing
        return {}
    return namespace if isinstance(namespace, dict) else {}


def static_attribute(value: Any, name: str) -> Any:
    """`value.name`, looked up without running a `__getattr__`, property, descriptor or metaclass: a
    module's namespace entry, an entry of the instance's own `__dict__`, or what a class defines (a
    function bound to `value` when `value` is an instance); `DATA` for what a property or slot holds,
    `MISSING` where a static look-up cannot tell."""
    if is_module(value):
        return namespace_of(value).get(name, MISSING)
    try:
        if issubclass(type(value), type):
            found = _class_member(value, name)
            return found.__func__ if type(found) in (staticmethod, classmethod) else found
        found = _class_member(type(value), name)
        kind = type(found)
        if issubclass(kind, property) or kind in (types.GetSetDescriptorType, types.MemberDescriptorType):
            return DATA  # computed or stored by the object: its value is not read here
        own = _instance_dict(value).get(name, MISSING)
        if own is not MISSING:
            return own
        if kind in (staticmethod, classmethod):
            return found.__func__
        if kind is types.FunctionType:
            return types.MethodType(found, value)
        return found
    except Exception:  # noqa: BLE001 - an object too odd to look into: its attribute is not known
        return MISSING


_MRO = type.__dict__["__mro__"]
_CLASS_DICT = type.__dict__["__dict__"]


def _class_member(klass: type, name: str) -> Any:
    """What `klass` or a class of its MRO defines under `name`, read from their own dicts."""
    for entry in _MRO.__get__(klass, type):
        members = _CLASS_DICT.__get__(entry, type)
        if name in members:
            return members[name]
    return MISSING


def _instance_dict(value: Any) -> Mapping[str, Any]:
    """The instance's own `__dict__`, when its class keeps one the ordinary way."""
    slot = _class_member(type(value), "__dict__")
    if type(slot) is types.GetSetDescriptorType:
        found = slot.__get__(value, type(value))
        if type(found) is dict:
            return found
    return {}
