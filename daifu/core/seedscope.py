"""The prototype's scope model, for functions vaccinated with `@daifu.transform(globals())`.

In the research prototype a vaccinated function's variables are its module's globals: another
function reads them while it runs, module code after the call sees them. Its programs rely on
that, so `transform(globals())` reproduces it; `@daifu.transform` and `@daifu.transform()` keep
ordinary local variables.

The rules (`seed_names`), from the function's syntax tree, its decorators, defaults and nested
scopes included:

- *shared names*, read and written as module globals at every statement of the function's own
  code: every name that appears as a `Name`, minus those only ever called directly (`f(...)`)
  and builtins, plus every name assigned with `=` and every parameter, plus the names of nested
  `def` and `class` statements; never `daifu`, the function's closure variables, names it
  declares `nonlocal`, or names it annotates (`x: int = 0`, which Python cannot make global);
- *restorable names*, a subset: the parameters of the function and of its nested functions,
  `for NAME in` targets and `NAME = ...` targets, minus names declared `global` anywhere in it.
  Augmented assignments, tuple targets, `with ... as`, `except ... as`, imports and `:=` are
  not restorable.

On entry (`SeedScope.enter`), for each shared name in sorted order: a restorable name that is
already a module global has its value saved; a parameter becomes the module global of that name
with the argument's value; any other name not yet a global is set to `None` (a name read before
the function binds it reads `None`). On exit — a return or an exception — the saved values are
put back (`SeedScope.leave`); every other name keeps the function's last value. Recursion saves
and restores per call. A callee that rebinds a global changes what the function reads next.

How: the user's function object gets a thin *wrapper* code with its own signature and closure
(`wrapper_definition`), which enters the scope, calls the *body* — a function of no parameters
whose shared names are all declared `global` (`body_definition`), the one the runtime
vaccinates, versions and resumes — and leaves the scope. Surgeries replace the body; the wrapper
never changes (a surgery may not change the parameters).

Deliberate differences from the prototype: a nested `def` runs when reached, as in Python (the
prototype hoists it to decoration time); a parameter named like a builtin (`input`) is shared
(the prototype reads the builtin in the body); every kind of parameter is restorable (the
prototype: positional ones); the names are restored when the call ends by an exception too (in
the prototype no `Exception` ever leaves the call). A method that calls zero-argument `super()`
cannot run this way (the body has no `self` argument): use `super(Class, self)`.
"""

from __future__ import annotations

import ast
import builtins
import copy
from collections.abc import Collection
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from daifu.core.compiling import RUNTIME, no_arguments, place

_BUILTINS = frozenset(dir(builtins))
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


@dataclass(frozen=True)
class SeedNames:
    """The names of one version of a function under the prototype's scope model (see the module)."""

    shared: tuple[str, ...]
    restorable: frozenset[str] = field(default_factory=frozenset)
    parameters: tuple[str, ...] = ()


def parameter_names(args: ast.arguments) -> list[str]:
    """Every parameter of a signature, in order: positional-only, positional, `*args`, keyword-only, `**kwargs`."""
    names = [a.arg for a in args.posonlyargs + args.args]
    names += [args.vararg.arg] if args.vararg else []
    names += [a.arg for a in args.kwonlyargs]
    names += [args.kwarg.arg] if args.kwarg else []
    return names


def seed_names(fdef: ast.FunctionDef, free_names: Collection[str]) -> SeedNames:
    """The shared and restorable names of `fdef`, whose closure variables are `free_names`."""
    appearing: set[str] = set()
    arguments: set[str] = set()
    called: set[str] = set()
    assigned: set[str] = set()
    defined: set[str] = set()
    annotated: set[str] = set()
    nonlocal_: set[str] = set()
    declared_global: set[str] = set()
    restorable: set[str] = set()
    for node in ast.walk(fdef):
        if isinstance(node, ast.Name):
            appearing.add(node.id)
        elif isinstance(node, ast.arg):
            arguments.add(node.arg)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            called.add(node.func.id)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                elements = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
                assigned.update(e.id for e in elements if isinstance(e, ast.Name))
                if isinstance(target, ast.Name):
                    restorable.add(target.id)
        elif isinstance(node, ast.For) and isinstance(node.target, ast.Name):
            restorable.add(node.target.id)
        elif isinstance(node, ast.Nonlocal):
            nonlocal_.update(node.names)
        elif isinstance(node, ast.Global):
            declared_global.update(node.names)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node is not fdef:
                defined.add(node.name)
            if isinstance(node, ast.FunctionDef):
                restorable.update(parameter_names(node.args))
        elif isinstance(node, ast.ClassDef):
            defined.add(node.name)
    for node in _own_statements(fdef):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            annotated.add(node.target.id)  # Python cannot make an annotated name global
    parameters = parameter_names(fdef.args)
    shared = ((appearing - called) | arguments) - _BUILTINS
    shared |= assigned | defined | set(parameters)
    shared -= {"daifu", "__class__"} | set(free_names) | nonlocal_ | annotated
    return SeedNames(tuple(sorted(shared)), frozenset((restorable - declared_global) & shared), tuple(parameters))


def _own_statements(fdef: ast.FunctionDef) -> list[ast.AST]:
    """The nodes of `fdef`'s own scope: not those of the functions, classes, lambdas and
    comprehensions it contains."""
    found: list[ast.AST] = []
    todo: list[ast.AST] = list(fdef.body)
    while todo:
        node = todo.pop()
        found.append(node)
        if not isinstance(node, (*_SCOPES, ast.ClassDef, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            todo.extend(ast.iter_child_nodes(node))
    return found


def _declaration(names: SeedNames, where: ast.AST) -> list[ast.stmt]:
    if not names.shared:
        return []
    return place([ast.Global(names=list(names.shared))], where)


def body_definition(fdef: ast.FunctionDef) -> ast.FunctionDef:
    """The body's definition: `fdef` without parameters (its statements are shared, not copied)."""
    body = copy.copy(fdef)
    body.args = no_arguments()
    return body


def declared_body(fdef: ast.FunctionDef, names: SeedNames) -> tuple[ast.FunctionDef, tuple[ast.stmt, ...]]:
    """The body's definition with its `global` declaration first (to compile it plainly), and the
    declaration alone (which the fast path and every continuation repeat at their top)."""
    declaration = _declaration(names, fdef)
    body = body_definition(fdef)
    body.body = declaration + fdef.body
    return body, tuple(declaration)


def wrapper_definition(fdef: ast.FunctionDef, free_names: Collection[str]) -> ast.FunctionDef:
    """The code the user's function object runs: `fdef`'s signature, then

        @saved = @rt.enter({"p": p, ...})
        try:
            return @rt.body()
        finally:
            @rt.leave(@saved)

    It names each of `free_names` in a branch that never runs, so its code has the function's
    closure variables (its code can then replace the function's own, in place).
    """
    runtime = ast.Constant(RUNTIME)

    def call(attribute: str, *arguments: ast.expr) -> ast.Call:
        return ast.Call(func=ast.Attribute(value=runtime, attr=attribute, ctx=ast.Load()), args=list(arguments),
                        keywords=[])

    parameters = parameter_names(fdef.args)
    values: list[ast.expr] = [ast.Name(id=p, ctx=ast.Load()) for p in parameters]
    given = ast.Dict(keys=[ast.Constant(p) for p in parameters], values=values)
    saved = ast.Assign(targets=[ast.Name(id="@saved", ctx=ast.Store())], value=call("enter", given))
    run = ast.Try(
        body=[ast.Return(value=call("body"))],
        handlers=[],
        orelse=[],
        finalbody=[ast.Expr(call("leave", ast.Name(id="@saved", ctx=ast.Load())))],
    )
    body: list[ast.stmt] = [saved, run]
    closure = [name for name in free_names if name != "__class__"]
    if closure:
        named = ast.Tuple(elts=[ast.Name(id=name, ctx=ast.Load()) for name in closure], ctx=ast.Load())
        body.append(ast.If(test=ast.Constant(False), body=[ast.Expr(named)], orelse=[]))
    spot = ast.Pass(lineno=fdef.lineno, col_offset=fdef.col_offset, end_lineno=fdef.lineno,
                    end_col_offset=fdef.col_offset + 3)
    wrapper = copy.copy(fdef)
    wrapper.body = place(body, spot)
    return wrapper


class SeedScope:
    """What a seed-scope function's wrapper calls (`@rt`): entering and leaving its scope.

    body: the vaccinated body function; names: the current version's names (the runtime updates
    them when a surgery installs a new version); globals: the module's globals.
    """

    def __init__(self, globals_: dict[str, Any], names: SeedNames) -> None:
        self.globals = globals_
        self.names = names
        self.body: Any = None

    def enter(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Make the call's names module globals; return the values to put back when it ends."""
        module, names = self.globals, self.names
        saved = {}
        for name in names.shared:
            if name in names.restorable and name in module:
                saved[name] = module[name]
            if name in arguments:
                module[name] = arguments[name]
            elif name not in module:
                module[name] = None
        return saved

    def leave(self, saved: dict[str, Any]) -> None:
        """Put back the module values that `enter` saved."""
        self.globals.update(saved)

    def rebind(self, namespace: dict[str, Any]) -> None:
        """Bind again the shared names of `namespace`, the snapshot a run resumes with, that the
        module lost since it was taken: a frame unwinding from a crash inside `except ... as e`
        unbinds `e` (Python's cleanup on leaving a handler) although the run resumes inside the
        handler. The unwinding only unbinds names; a name bound in the module is left as it is."""
        module = self.globals
        for name in self.names.shared:
            if name in namespace and name not in module:
                module[name] = namespace[name]

    def view(self) -> dict[str, Any]:
        """The function's variables now: its shared names bound in the module (modules left out).

        This is what a crash shows as the function's locals, what the console's `!x = ...` edits,
        and what tells whether a run made progress between two crashes.
        """
        module = self.globals
        return {
            name: module[name]
            for name in self.names.shared
            if name in module and not isinstance(module[name], ModuleType)
        }

    def write_back(self, namespace: dict[str, Any], before: dict[str, Any]) -> None:
        """Rebind in the module the shared names that `namespace` changed since `before` (the view
        at the crash): the console's edits, a repair's rebinds. A name removed is unbound."""
        module = self.globals
        for name in before:
            if name not in namespace:
                module.pop(name, None)
        for name in self.names.shared:
            if name in namespace and (name not in before or namespace[name] is not before[name]):
                module[name] = namespace[name]
