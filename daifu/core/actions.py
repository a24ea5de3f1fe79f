"""Running an action: code executed in the live context of a crashed frame.

The action's code becomes the body of a function nested in the crashed function's scope: each of
the frame's locals is a variable of that scope, which the action reads and rebinds; a class or
function the action defines sees the action's other definitions (and itself, as
`super(Policy, self)` needs) through ordinary closures. Names the action binds that are not the
function's locals become the module's globals, as the console's users expect.
"""

from __future__ import annotations

import ast
import itertools
import keyword
from types import CellType, CodeType
from typing import Any

from daifu.core.compiling import compile_definition, function_def, make_function, register_source

_numbers = itertools.count(1)


class ActionFailed(Exception):
    """The action does not compile, or raised; the message says which and where."""


def compile_action(code: str, names: list[str], flags: int = 0) -> CodeType:
    """The code object of `code` as a function whose free variables are `names`."""
    filename = f"<daifu action {next(_numbers)}>"
    try:
        tree = ast.parse(code, filename)
    except SyntaxError as error:
        raise ActionFailed(f"the action does not parse: line {error.lineno}: {error.msg}") from None
    variables = [name for name in names if name.isidentifier() and not keyword.iskeyword(name)]
    body: list[ast.stmt] = [ast.Nonlocal(names=variables)] if variables else []
    body += tree.body
    body.append(ast.Return(value=ast.Call(func=ast.Name(id="locals", ctx=ast.Load()), args=[], keywords=[])))
    action = function_def("@action", body)
    ast.fix_missing_locations(ast.copy_location(action, tree.body[0] if tree.body else ast.Pass(lineno=1)))
    try:
        compiled = compile_definition(action, filename, flags, tuple(variables))
    except SyntaxError as error:
        raise ActionFailed(f"the action does not compile: line {error.lineno}: {error.msg}") from None
    if compiled.co_flags & 0x20:  # CO_GENERATOR: a `yield` would turn the action into a generator
        raise ActionFailed("the action uses `yield`")
    register_source(filename, 1, code)
    return compiled


def run_action(
    code: str, namespace: dict[str, Any], local_names: set[str], globals_: dict[str, Any], flags: int = 0
) -> None:
    """Run action `code` on the locals `namespace` of a function whose module globals are `globals_`.

    `local_names` are the function's local variables: the action's bindings of those go to
    `namespace` (an unbound one is removed), its other bindings to the module's globals.
    """
    names = [name for name in namespace if name.isidentifier()]
    compiled = compile_action(code, names, flags)
    cells = {name: CellType(namespace[name]) for name in compiled.co_freevars if name in namespace}
    function = make_function(compiled, globals_, cells)
    try:
        bound = function()
    except Exception as error:
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
            globals_[name] = value
