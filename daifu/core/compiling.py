"""Compiling generated function definitions as the original was compiled, and binding closures.

A definition is compiled inside a factory that declares the function's free variables, so the
code object refers to them as closure cells; the factory itself is never run, so decorators,
default values and annotations are not evaluated again. Methods that use zero-argument `super()`
are compiled inside a class, which gives their code the implicit `__class__` cell.

Generated code reaches DaiFu's runtime through one constant (`RUNTIME`, a string no user code
holds), which `compile_definition` replaces in the compiled constants by the function's runtime
helper object. The generated code then has exactly the closure of the original function, so the
original function object can be given the vaccinated code in place (`function.__code__ = ...`)
and every decorator wrapper holding it runs the vaccinated code.
"""

from __future__ import annotations

import __future__
import ast
import linecache
import os
import sys
from types import CellType, CodeType, FunctionType, TracebackType
from typing import Any
from collections.abc import Mapping

_FUTURE_FLAGS = 0
for _feature in __future__.all_feature_names:
    _FUTURE_FLAGS |= getattr(__future__, _feature).compiler_flag


RUNTIME = f"@daifu-runtime-{os.urandom(16).hex()}"
"""The placeholder constant that generated code loads to reach the runtime helper (`@rt`): 128 random
bits, as a UUID4 has, without `uuid`, whose import (it loads `platform`) would cost a vaccinated program 3 ms."""


def place(nodes: list[Any], where: ast.AST) -> list[Any]:
    """Give generated nodes without a place in the file the place of the user's `where`.

    Nodes that have one (the user's, or generated ones placed before) keep it, and the walk does
    not enter them: placing is linear in the generated nodes, not in the whole tree. The walk reads
    the fields itself: `ast.iter_child_nodes` took twice as long, and a continuation places
    hundreds of nodes.
    """
    line, col = where.lineno, where.col_offset  # type: ignore[attr-defined]
    end_line, end_col = where.end_lineno, where.end_col_offset  # type: ignore[attr-defined]
    todo: list[ast.AST] = list(nodes)
    while todo:
        node = todo.pop()
        if "lineno" in node._attributes:
            if getattr(node, "lineno", None) is not None:
                continue
            node.lineno, node.col_offset = line, col  # type: ignore[attr-defined]
            node.end_lineno, node.end_col_offset = end_line, end_col  # type: ignore[attr-defined]
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, ast.AST):
                todo.append(value)
            elif isinstance(value, list):
                todo += [item for item in value if isinstance(item, ast.AST)]
    return nodes


def located(where: ast.AST) -> dict[str, Any]:
    """The place of `where` as keyword arguments of a node's constructor: a node created with them
    is placed already, and `place` does not walk it."""
    return {
        "lineno": where.lineno,  # type: ignore[attr-defined]
        "col_offset": where.col_offset,  # type: ignore[attr-defined]
        "end_lineno": where.end_lineno,  # type: ignore[attr-defined]
        "end_col_offset": where.end_col_offset,  # type: ignore[attr-defined]
    }


TYPE_PARAMS: dict[str, Any] = {"type_params": []} if sys.version_info >= (3, 12) else {}
"""The field Python 3.12 added to function and class definitions (PEP 695), empty."""


def function_def(name: str, body: list[ast.stmt]) -> ast.FunctionDef:
    """A `def name():` with `body`, no decorators, as every Python version builds one."""
    return ast.FunctionDef(name=name, args=no_arguments(), body=body, decorator_list=[], returns=None, **TYPE_PARAMS)


def no_arguments() -> ast.arguments:
    """An empty parameter list, to be filled in."""
    return ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])


def future_flags(code: CodeType) -> int:
    """The `from __future__` flags `code` was compiled with (executing's `compile_similar_to`)."""
    return code.co_flags & _FUTURE_FLAGS


def compile_definition(
    fdef: ast.FunctionDef, filename: str, flags: int, free_names: tuple[str, ...], runtime: object = None
) -> CodeType:
    """Compile `fdef` so that the names in `free_names` are its closure variables.

    The `RUNTIME` placeholder constants of the generated code become `runtime`.
    """
    declared = [name for name in free_names if name != "__class__"]
    body: list[ast.stmt] = []
    if fdef.name not in free_names:  # the `def` must not make the function's own name a factory local:
        body.append(ast.Global(names=[fdef.name]))  # a recursive call reads it as the original does
    if declared:
        targets: list[ast.expr] = [ast.Name(id=name, ctx=ast.Store()) for name in declared]
        body.append(ast.Assign(targets=targets, value=ast.Constant(value=None)))
    if "__class__" in free_names:
        body.append(ast.ClassDef(name="@class", bases=[], keywords=[], body=[fdef], decorator_list=[], **TYPE_PARAMS))
    else:
        body.append(fdef)
    factory = function_def("@factory", body)
    module = ast.Module(body=[factory], type_ignores=[])
    place([factory], fdef)
    code = compile(module, filename, "exec", flags=flags, dont_inherit=True)
    return bind_constant(_find_code(code, fdef.name), RUNTIME, runtime)


def qualified(code: CodeType, qualname: str) -> CodeType:
    """`code` named `qualname` in tracebacks (`co_qualname`, which Python 3.10 code does not have)."""
    return code.replace(co_qualname=qualname) if sys.version_info >= (3, 11) else code


def bind_constant(code: CodeType, placeholder: str, value: object) -> CodeType:
    """`code` (and its nested code objects) with the constant `placeholder` replaced by `value`."""
    constants = tuple(
        value
        if type(constant) is str and constant == placeholder
        else bind_constant(constant, placeholder, value)
        if isinstance(constant, CodeType)
        else constant
        for constant in code.co_consts
    )
    return code.replace(co_consts=constants)


def _find_code(code: CodeType, name: str) -> CodeType:
    todo = [code]
    while todo:
        current = todo.pop()
        for constant in current.co_consts:
            if isinstance(constant, CodeType):
                if constant.co_name == name and current.co_name in ("@factory", "@class"):
                    return constant
                todo.append(constant)
    raise LookupError(f"no code object named {name!r} was compiled")


def make_function(
    code: CodeType,
    globals_: dict[str, Any],
    cells: Mapping[str, CellType],
    defaults: tuple[Any, ...] | None = None,
) -> FunctionType:
    """A function of `code` whose closure takes each free variable's cell from `cells` by name.

    A free variable with no cell there gets a new empty cell.
    """
    closure = tuple(cells[name] if name in cells else CellType() for name in code.co_freevars)
    return FunctionType(code, globals_, code.co_name, defaults, closure or None)


def register_source(filename: str, first_lineno: int, source: str) -> None:
    """Let `linecache` (tracebacks, pdb, `inspect`) show `source` as lines of `filename` from
    `first_lineno` on: the text of code that exists in no file (a surgery's version, an action)."""
    lines = ["\n"] * (first_lineno - 1) + source.splitlines(keepends=True)
    linecache.cache[filename] = (len(source), None, lines, filename)
    _uncaught_tracebacks_read_linecache()


def _uncaught_tracebacks_read_linecache() -> None:
    """Before Python 3.13 the interpreter prints an uncaught exception in C, reading each line of its
    traceback from the file a frame names: the lines of code that exists in no file (`register_source`)
    are missing there, though `traceback` and every tool that reads `linecache` show them. The default
    hook then gives way to one that prints with `traceback` (the same text, with those lines); a hook
    the program installed is left as it is."""
    if sys.version_info < (3, 13) and sys.excepthook is sys.__excepthook__:
        sys.excepthook = _print_uncaught


def _print_uncaught(kind: type[BaseException], error: BaseException, tb: TracebackType | None) -> None:
    import traceback

    try:
        traceback.print_exception(kind, error, tb)
    except Exception:  # noqa: BLE001 - the interpreter's own printer, rather than nothing
        sys.__excepthook__(kind, error, tb)
