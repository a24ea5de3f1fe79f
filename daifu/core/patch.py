"""Patching a function the crashed statement called: its code replaced in place by a new `def`.

The new source is compiled the way a surgery is (`daifu.core.compiling`): with the function's own
`from __future__` flags and closure variables, under a file name that says it is patched and whose
text `linecache` knows, so tracebacks show the code that ran. The function object keeps its
identity, name, parameters, defaults and closure; a vaccinated function is given a new version,
so it stays vaccinated.
"""

from __future__ import annotations

import inspect
import itertools
import re
import sys
from types import CodeType, FunctionType, MethodType
from typing import Any

from daifu.core.compiling import compile_definition, future_flags, qualified, register_source
from daifu.core.source import normalize, parse_function
from daifu.core.surgery import SurgeryRefused, check_same_signature

_SYS_MODULES = re.compile(r"""^sys\.modules\[(['"])(?P<module>[\w.]+)\1\]\.(?P<qualname>[\w.]+)$""")
_numbers = itertools.count(1)


class PatchRefused(Exception):
    """The function cannot be patched with this source; the message says why. Nothing changed."""


def resolve(target: str) -> FunctionType:
    """The function named by `module:qualname` (or `sys.modules['module'].qualname`), without
    evaluating any code: modules are looked up in `sys.modules`, then attributes one by one.

    The function itself may be a special method (`CsvRows.__getitem__`); nothing on the way to it
    may be a special name: through `__class__`, `__dict__` or `__globals__` a path could reach
    what is not a function of the program's own classes and modules."""
    found = _SYS_MODULES.match(target.strip())
    if found is not None:
        module_name, qualname = found.group("module"), found.group("qualname")
    else:
        module_name, _, qualname = target.strip().partition(":")
    if not module_name or not qualname or "<locals>" in qualname:
        raise PatchRefused(f"{target!r} does not name a module-level function or method (module:qualname)")
    module = sys.modules.get(module_name)
    if module is None:
        raise PatchRefused(f"the module {module_name!r} is not loaded")
    value: Any = module
    parts = qualname.split(".")
    for position, part in enumerate(parts):
        special_method = position == len(parts) - 1 and isinstance(value, type) and part.endswith("__")
        if not part.isidentifier() or (part.startswith("__") and not special_method):
            raise PatchRefused(f"{qualname!r} is not a plain qualified name")
        value = inspect.getattr_static(value, part, None)
        if value is None:
            raise PatchRefused(f"{module_name}.{qualname} does not exist")
    if isinstance(value, (staticmethod, classmethod, MethodType)):
        value = value.__func__
    value = inspect.unwrap(value) if callable(value) else value
    if not isinstance(value, FunctionType):
        raise PatchRefused(f"{module_name}.{qualname} is not a Python function")
    return value


def patch_function(function: FunctionType, source: str) -> None:
    """Give `function` the code of `source` (a whole `def` of the same name and parameters)."""
    vaccine = getattr(function, "__daifu__", None)
    if vaccine is not None:
        vaccine.replace_source(source)
        return
    filename = f"{function.__code__.co_filename} (patch {next(_numbers)})"
    compiled = _compiled(function, source, filename)
    register_source(filename, function.__code__.co_firstlineno, "".join(source.splitlines(keepends=True)))
    function.__code__ = compiled


def check_patch(target: str, source: str) -> None:
    """Why patching `target` with `source` would be refused (`PatchRefused`), checked as
    `patch_function` checks it; changes nothing."""
    function = resolve(target)
    vaccine = getattr(function, "__daifu__", None)
    if vaccine is not None:
        vaccine.patched_version(source)
    else:
        _compiled(function, source, f"{function.__code__.co_filename} (patch)")


def _compiled(function: FunctionType, source: str, filename: str) -> CodeType:
    """The code `source` gives `function`, compiled under `filename`; `PatchRefused` when it may not."""
    code = function.__code__
    try:
        old_source, first = inspect.getsourcelines(function)
        old = normalize(parse_function("".join(old_source), first))
        new = normalize(parse_function(source, code.co_firstlineno))
        check_same_signature(old, new)
    except (OSError, TypeError, SyntaxError) as error:
        raise PatchRefused(f"cannot patch {function.__qualname__}: {error}") from None
    except SurgeryRefused as refusal:
        raise PatchRefused(str(refusal)) from None
    try:
        compiled = compile_definition(new, filename, future_flags(code), code.co_freevars)
    except SyntaxError as error:
        raise PatchRefused(f"the new source of {function.__qualname__} does not compile: {error.msg}") from None
    if compiled.co_freevars != code.co_freevars:
        raise PatchRefused(f"the new source of {function.__qualname__} needs other closure variables")
    if compiled.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE) != code.co_flags & (
        inspect.CO_GENERATOR | inspect.CO_COROUTINE
    ):
        raise PatchRefused(f"the new source changes whether {function.__qualname__} is a generator or coroutine")
    return qualified(compiled, function.__qualname__)
