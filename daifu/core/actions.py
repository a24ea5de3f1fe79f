"""Running an action: code executed in the live context of a crashed frame.

The action's code becomes the body of a function nested in the crashed function's scope: each of
the frame's locals is a variable of that scope, which the action reads and rebinds; a class or
function the action defines sees the action's other definitions (and itself, as
`super(Policy, self)` needs) through ordinary closures. Names the action binds that are not the
function's locals become the module's globals, as the console's users expect; a module global the
function reads that the action assigns (`lr = lr / 2`, `lr *= 0.5`) is the module's variable in the
action too (`global`), so the action reads its value before rebinding it, as the function would.

Under the prototype's scope model (`daifu.core.seedscope`) the function's variables are module
globals, and an action runs as the prototype ran it: as module code, in the module's namespace
(`run_module_action`), so what it defines is a module global that the function and the action's
own classes and functions all see.

Either way an action that raises is refused with the names it bound put back; each run returns
the module globals it bound with their old values (`Undo`), so a caller that carries out several
plays can put them back too when a later one is refused.
"""

from __future__ import annotations

import ast
import functools
import itertools
import keyword
from types import CellType, CodeType
from typing import Any


from daifu.core.compiling import compile_definition, function_def, make_function, register_source

_numbers = itertools.count(1)
_UNBOUND = object()

Undo = dict[str, Any]
"""Module globals an action bound, each with its value before (`_UNBOUND`: it was not bound)."""


def undo(globals_: dict[str, Any], journal: Undo) -> None:
    """Put back the module globals of `journal` as they were before the action."""
    for name, value in journal.items():
        if value is _UNBOUND:
            globals_.pop(name, None)
        else:
            globals_[name] = value


class ActionFailed(Exception):
    """The action does not compile, or raised; the message says which and where."""


def _parse(code: str, filename: str) -> ast.Module:
    try:
        return ast.parse(code, filename)
    except SyntaxError as error:
        raise ActionFailed(f"the action does not parse: line {error.lineno} of the action: {error.msg}") from None


@functools.lru_cache(maxsize=64)
def assigned(code: str) -> frozenset[str]:
    """The variables the action's own scope assigns (`=`, `+=`, an annotation with a value, a `for` or
    `with` target, `except ... as`, `:=`, `del`): not those of the functions, classes, lambdas and
    comprehensions it holds, nor the names its `def`, `class` and `import` statements bind."""
    found: set[str] = set()
    todo: list[ast.AST] = list(_parse(code, "<daifu action>").body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp,
                             ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            found.add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            found.add(node.name)
        todo.extend(ast.iter_child_nodes(node))
    return frozenset(found)


@functools.lru_cache(maxsize=64)
def compile_action(code: str, names: tuple[str, ...], flags: int = 0, module_names: tuple[str, ...] = ()) -> CodeType:
    """The code object of `code` as a function whose free variables are `names` and in which the module
    globals `module_names` are declared `global`.

    Kept for the next time: the same action at the same site (a repeated crash, a replay) reuses it.
    """
    filename = f"<daifu action {next(_numbers)}>"
    tree = _parse(code, filename)
    declared = {name for statement in tree.body if isinstance(statement, ast.Global) for name in statement.names}
    variables = [name for name in names if name.isidentifier() and not keyword.iskeyword(name) and name not in declared]
    body: list[ast.stmt] = [ast.Nonlocal(names=variables)] if variables else []
    shared = [name for name in module_names if name not in declared and name not in variables]
    if shared:
        body.append(ast.Global(names=shared))
    body += tree.body
    body.append(ast.Return(value=ast.Call(func=ast.Name(id="locals", ctx=ast.Load()), args=[], keywords=[])))
    action = function_def("@action", body)
    ast.fix_missing_locations(ast.copy_location(action, tree.body[0] if tree.body else ast.Pass(lineno=1)))
    try:
        compiled = compile_definition(action, filename, flags, tuple(variables))
    except SyntaxError as error:
        raise ActionFailed(f"the action does not compile: line {error.lineno} of the action: {error.msg}") from None
    if compiled.co_flags & 0x20:  # CO_GENERATOR: a `yield` would turn the action into a generator
        raise ActionFailed("the action uses `yield`")
    register_source(filename, 1, code)
    return compiled


def run_action(
    code: str, namespace: dict[str, Any], local_names: set[str], globals_: dict[str, Any], flags: int = 0
) -> Undo:
    """Run action `code` on the locals `namespace` of a function whose module globals are `globals_`.

    `local_names` are the function's local variables: the action's bindings of those go to
    `namespace` (an unbound one is removed), its other bindings to the module's globals. Returns
    the module globals it bound, with their old values; an action that raises leaves them as they were.
    """
    names = tuple(name for name in namespace if name.isidentifier())
    module_names = tuple(sorted(name for name in assigned(code)
                                if name in globals_ and name not in namespace and name not in local_names))
    compiled = compile_action(code, names, flags, module_names)
    cells = {name: CellType(namespace[name]) for name in compiled.co_freevars if name in namespace}
    function = make_function(compiled, globals_, cells)
    journal: Undo = {name: globals_[name] for name in module_names}  # rebound in place by the action
    try:
        bound = function()
    except Exception as error:
        undo(globals_, journal)
        raise ActionFailed(f"the action raised {type(error).__name__}: {error}") from error
    for name, cell in cells.items():
        try:
            namespace[name] = cell.cell_contents
        except ValueError:  # `del name` in the action
            del namespace[name]
    for name, value in bound.items():
        if name in cells:
            continue
        if name in local_names:
            namespace[name] = value
        elif not name.startswith("__"):
            journal[name] = globals_.get(name, _UNBOUND)
            globals_[name] = value
    return journal


def run_module_action(code: str, globals_: dict[str, Any], flags: int = 0) -> Undo:
    """Run action `code` as module code in `globals_` (`exec(code, globals_)`, as the prototype did).

    If it raises, the module names it may have bound are put back and `ActionFailed` says why.
    Returns the module globals it bound, with their old values.
    """
    filename = f"<daifu action {next(_numbers)}>"
    try:
        compiled = compile(code, filename, "exec", flags=flags, dont_inherit=True)
    except SyntaxError as error:
        raise ActionFailed(f"the action does not compile: line {error.lineno} of the action: {error.msg}") from None
    register_source(filename, 1, code)
    before: Undo = {name: globals_.get(name, _UNBOUND) for name in _names(compiled)}
    try:
        exec(compiled, globals_)
    except Exception as error:
        undo(globals_, before)
        raise ActionFailed(f"the action raised {type(error).__name__}: {error}") from error
    return {name: value for name, value in before.items() if globals_.get(name, _UNBOUND) is not value}


def _names(code: CodeType) -> set[str]:
    """Every global name `code` (and the code nested in it) may read or bind."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, CodeType):
            names |= _names(constant)
    return names
