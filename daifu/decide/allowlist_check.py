"""The walk of `daifu.allowlist`: every construct of checked code, against the allowlists.

`Checker` appends one reason per construct outside the language, naming it and its line; it reads
the tables of `daifu.allowlist_tables` and what `daifu.allowlist_context` learnt from the live frame.
"""

from __future__ import annotations

import ast
import builtins
import functools
import math
import operator
import re
import string
import textwrap
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from daifu.decide.allowlist_tables import (
    BOUNDS_NOT_SIZES,
    BROAD_EXCEPTIONS,
    BUILTINS,
    CONTAINER_METHODS,
    CONTEXT_MANAGERS,
    IMPORTS,
    MAX_CODE,
    MAX_ELEMENTS,
    MAX_INT,
    MAX_RANGE,
    MAX_SLEEP_S,
    METHODS,
    STRING_METHODS,
    STRING_RESULTS,
    VALUES,
    builds_container,
)
from daifu.decide.allowlist_callables import program_function
from daifu.decide.allowlist_reach import Reach
from daifu.decide.allowlist_system import system_attributes

_PLAIN_FIELD = re.compile(r"\w*")

if TYPE_CHECKING:
    from daifu.decide.allowlist_context import Context


class Checker:
    """Walks statements, appending a reason (with its line) for every construct outside the allowlist.

    `bound` holds every name the checked code binds (assignments, loop and comprehension targets,
    `with ... as`, `except ... as`, lambda parameters); `imports` maps the names its imports bind to
    the module or allowlisted path they stand for. `deletable` are the names the code (an action) or
    its function (a surgery) assigns; `known` adds the frame's names and the function's parameters.
    `first_lineno` is the file line of the checked source's first line (a surgery's, a patch's), or
    `None` for an action, whose lines are its own: every reason names the line a person can find.
    `backwards` are the `.backward()` calls admitted as a micro-batch loop's (`id` of their `ast.Call`:
    `daifu.decide.allowlist_accumulate`), read from the whole new function before the walk.
    """

    def __init__(
        self,
        context: Context,
        statements: list[ast.stmt],
        deletable: frozenset[str],
        parameters: frozenset[str],
        first_lineno: int | None = None,
        backwards: frozenset[int] = frozenset(),
    ) -> None:
        self.context = context
        self.backwards = backwards
        self._reach: Reach | None = None
        self.first_lineno = first_lineno
        self.deletable = deletable
        self.known = context.names | deletable | parameters
        self.reasons: list[str] = []
        self.imports: dict[str, str] = {}
        self.bound: set[str] = set()
        self.made_containers: set[str] = set()
        self.made_strings: set[str] = set()
        self.scopes: list[set[str]] = []
        """The names bound by the lambdas and comprehensions around the expression being checked."""
        self._collect(statements)

    def refuse(self, node: ast.AST | None, what: str) -> None:
        line = getattr(node, "lineno", None)
        self.reasons.append(f"{self.line(line)}: {what}" if line else what)

    def line(self, lineno: int) -> str:
        """`line N` of the file (a surgery, a patch), or `line N of the action`."""
        if self.first_lineno is None:
            return f"line {lineno} of the action"
        return f"line {self.first_lineno + lineno - 1}"

    # -- names the code binds, found before checking so that order does not matter

    def _collect(self, statements: list[ast.stmt]) -> None:
        container_bindings: dict[str, list[bool]] = {}
        string_bindings: dict[str, list[bool]] = {}
        for statement in statements:
            for node in ast.walk(statement):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    self.bound.add(node.id)
                elif isinstance(node, ast.arg):
                    self.bound.add(node.arg)
                elif isinstance(node, ast.ExceptHandler) and node.name:
                    self.bound.add(node.name)
                elif isinstance(node, (ast.Import, ast.ImportFrom)):
                    self._note_imports(node)
                for target, value in _bindings(node):
                    for name in (n.id for n in ast.walk(target) if isinstance(n, ast.Name)):
                        simple = isinstance(target, ast.Name) and value is not None
                        container_bindings.setdefault(name, []).append(simple and builds_container(value))
                        string_bindings.setdefault(name, []).append(simple and self._makes_string(value))
        self.made_containers = {name for name, kinds in container_bindings.items() if all(kinds)}
        self.made_strings = {name for name, kinds in string_bindings.items() if all(kinds)}

    def _makes_string(self, value: ast.expr | None) -> bool:
        """Whether `value` is certainly a `str`: a literal, an f-string, `str(...)`, a known str's method."""
        if isinstance(value, ast.Constant):
            return isinstance(value.value, str)
        if isinstance(value, ast.JoinedStr):
            return True
        if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add):
            return self._makes_string(value.left) or self._makes_string(value.right)
        if not isinstance(value, ast.Call):
            return False
        func = value.func
        if isinstance(func, ast.Name):
            return func.id == "str" and func.id not in self.context.names
        return (
            isinstance(func, ast.Attribute)
            and func.attr in STRING_RESULTS
            and isinstance(func.value, (ast.Name, ast.Constant))
            and (
                (isinstance(func.value, ast.Constant) and isinstance(func.value.value, str))
                or (isinstance(func.value, ast.Name) and func.value.id in self.context.strings)
            )
        )

    def _note_imports(self, node: ast.Import | ast.ImportFrom) -> None:
        for alias in node.names:
            if isinstance(node, ast.Import):
                name, meaning = import_meaning(alias)
                self.imports[name] = meaning
            elif node.module and node.level == 0 and alias.name != "*":
                self.imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    # -- statements

    def statement(self, node: ast.stmt) -> None:
        handler = getattr(self, f"_stmt_{type(node).__name__}", None)
        if handler is None:
            self.refuse(node, f"`{_construct(node)}` is not allowed without a person")
            return
        handler(node)

    def _stmts(self, statements: list[ast.stmt]) -> None:
        for statement in statements:
            self.statement(statement)

    def _stmt_Expr(self, node: ast.Expr) -> None:
        self.expr(node.value)

    def _stmt_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self.target(target, node.value)
        self.expr(node.value)

    def _stmt_AugAssign(self, node: ast.AugAssign) -> None:
        self.target(node.target, None)
        self.expr(node.value)

    def _stmt_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.target(node.target, node.value)
        self.expr(node.annotation)  # evaluated when the code runs as an action
        if node.value is not None:
            self.expr(node.value)

    def _stmt_If(self, node: ast.If) -> None:
        self.expr(node.test)
        self._stmts(node.body + node.orelse)

    def _stmt_For(self, node: ast.For) -> None:
        self.target(node.target, None)
        self.expr(node.iter)
        self._stmts(node.body + node.orelse)

    def _stmt_With(self, node: ast.With) -> None:
        for item in node.items:
            call = item.context_expr
            path = self.module_path(call.func) if isinstance(call, ast.Call) else None
            if path not in CONTEXT_MANAGERS:
                self.refuse(item.context_expr, f"`with {text_of(item.context_expr)}`: only {_listed(CONTEXT_MANAGERS)}")
            self.expr(call)
            if item.optional_vars is not None:
                self.target(item.optional_vars, None)
        self._stmts(node.body)

    def _stmt_Try(self, node: ast.Try) -> None:
        for handler in node.handlers:
            self._handler(handler)
            self._stmts(handler.body)
        self._stmts(node.body + node.orelse + node.finalbody)

    def _handler(self, handler: ast.ExceptHandler) -> None:
        if handler.name and (handler.name in self.context.modules or handler.name in self.imports):
            self.refuse(handler, f"`except ... as {handler.name}` rebinds a module name")
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        for kind in kinds:
            if kind is None or (isinstance(kind, ast.Name) and kind.id in BROAD_EXCEPTIONS):
                self.refuse(handler, "an `except` that swallows every exception")
            elif kind is not None:
                self.expr(kind)

    def _stmt_Assert(self, node: ast.Assert) -> None:
        self.expr(node.test)
        if node.msg is not None:
            self.expr(node.msg)

    def _stmt_Raise(self, node: ast.Raise) -> None:
        for part in (node.exc, node.cause):
            if part is not None:
                self.expr(part)

    def _stmt_Return(self, node: ast.Return) -> None:
        if node.value is not None:
            self.expr(node.value)

    def _stmt_Pass(self, node: ast.Pass) -> None:
        pass

    _stmt_Break = _stmt_Continue = _stmt_Pass

    def _stmt_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            if isinstance(target, ast.Name):
                if target.id not in self.deletable:
                    self.refuse(target, f"`del {target.id}`: the code may delete only names it binds itself")
            else:
                self.target(target, None)

    def _stmt_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name not in IMPORTS:
                self.refuse(node, f"`import {alias.name}`: only {_listed(IMPORTS)} may be imported")
            name, meaning = import_meaning(alias)
            self._import_binding(node, name, meaning)

    def _stmt_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        for alias in node.names:
            full = f"{module}.{alias.name}"
            if alias.name == "*":
                self.refuse(node, f"`from {module} import *` binds names nobody can see")
            elif node.level or module not in IMPORTS or not (self.context.admits(full) or full in VALUES | IMPORTS):
                self.refuse(node, f"`from {'.' * node.level}{module} import {alias.name}` is not on the allowlist")
            else:
                self._import_binding(node, alias.asname or alias.name, full)

    def _import_binding(self, node: ast.stmt, name: str, meaning: str) -> None:
        known = self.context.modules.get(name)
        if (known is not None and known != meaning) or (known is None and name in self.context.names):
            self.refuse(node, f"the import rebinds `{name}`, which the function already uses for something else")

    # -- assignment targets

    def target(self, node: ast.expr, value: ast.expr | None) -> None:
        if isinstance(node, (ast.Tuple, ast.List)):
            for element in node.elts:
                self.target(element, None)
        elif isinstance(node, ast.Starred):
            self.target(node.value, None)
        elif isinstance(node, ast.Name):
            self._name_target(node, value)
        elif isinstance(node, ast.Attribute):
            self._attribute(node)
            self._receiver_not_module(node.value, node)
            self.expr(node.value)
            self._rebinding_a_callee(node, text_of(node), value)
        elif isinstance(node, ast.Subscript):
            self._receiver_not_module(node.value, node)
            self.expr(node.value)
            self.expr(node.slice)
        else:
            self.refuse(node, f"cannot assign to `{text_of(node)}`")

    def _name_target(self, node: ast.Name, value: ast.expr | None) -> None:
        name = node.id
        if name.startswith("__"):
            self.refuse(node, f"assigns the dunder name `{name}`")
        elif name in self.context.modules or name in self.imports:
            self.refuse(node, f"assigns `{name}`, a module name")
        elif name in builtins.__dict__ and name not in self.context.names:
            self.refuse(node, f"assigns `{name}`, which shadows a builtin")
        else:
            self._rebinding_a_callee(node, name, value)

    def _rebinding_a_callee(self, node: ast.expr, text: str, value: ast.expr | None) -> None:
        """A name the function calls may only be given a freshly built value, never a callable picked up."""
        if text in self.context.callables and not isinstance(value, ast.Call):
            self.refuse(node, f"rebinds `{text}`, which the function calls, to something other than a call's result")

    def _receiver_not_module(self, receiver: ast.expr, node: ast.AST) -> None:
        root = root_name(receiver)
        if root is not None and self.module_of(root) is not None:
            self.refuse(node, f"changes `{text_of(receiver)}`, a part of module `{self.module_of(root)}`")

    # -- expressions

    def expr(self, node: ast.expr) -> None:
        handler = getattr(self, f"_expr_{type(node).__name__}", None)
        if handler is None:
            self.refuse(node, f"`{_construct(node)}` is not allowed without a person")
            return
        handler(node)

    def _exprs(self, nodes: list[ast.expr]) -> None:
        for node in nodes:
            self.expr(node)

    def _expr_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, int) and not isinstance(node.value, bool) and abs(node.value) > MAX_INT:
            self.refuse(node, f"the integer literal {_short(node.value)} is larger than {MAX_INT}")

    def _expr_Name(self, node: ast.Name) -> None:
        name = node.id
        if name.startswith("__"):
            self.refuse(node, f"uses the dunder name `{name}`")
        elif self.module_of(name) is not None:
            self.refuse(node, f"uses the module `{name}` as a value")
        elif name in self.imports and not self._admitted(self.imports[name]):
            self.refuse(node, f"uses `{name}` ({self.imports[name]}) as a value")
        elif self._is_builtin(name) and name not in BUILTINS and not is_exception_class(name):
            self.refuse(node, f"uses the builtin `{name}`, which is not on the allowlist")
        elif not self._known(name):
            self.refuse(node, f"uses `{name}`, which is not defined where the code runs")
        elif name in self.context.refused and not self._own(name) and name not in self.context.paths:
            self.refuse(node, f"hands on `{name}` as a value, and a callable handed on is called: "
                              f"{self.context.refused[name]}")

    def _own(self, name: str) -> bool:
        """Whether `name` is bound by the checked code itself or by a lambda or comprehension around it."""
        return name in self.bound or any(name in scope for scope in self.scopes)

    def _admitted(self, path: str) -> bool:
        return self.context.admits(path) or path in VALUES

    def _known(self, name: str) -> bool:
        """Whether `name` is bound where it is read: in the frame, by the code or its function in their own
        scope, by the lambda or comprehension being checked, or as a builtin."""
        in_scope = any(name in scope for scope in self.scopes)
        return name in self.known or in_scope or name in self.imports or name in builtins.__dict__

    def _is_builtin(self, name: str) -> bool:
        return name in builtins.__dict__ and name not in self.context.names and name not in self.bound

    def _expr_Attribute(self, node: ast.Attribute) -> None:
        self._attribute(node)
        path = self.module_path(node)
        if path is not None:
            if not self._admitted(path):
                self.refuse(node, f"reads `{text_of(node)}` ({path}), which is not on the allowlist")
            return
        self._attribute_value(node)
        self.expr(node.value)

    def _attribute_value(self, node: ast.Attribute) -> None:
        """An attribute read as a value may be a callable handed on to something that calls it
        (`map(p.touch, ...)`, `max(key=p.chmod)`): judged as a call. Looked up on the frame's live
        value where that runs no code of the program; otherwise judged by its name."""
        chain: list[str] = []
        receiver: ast.expr = node
        while isinstance(receiver, ast.Attribute):
            chain.append(receiver.attr)
            receiver = receiver.value
        if isinstance(receiver, ast.Name) and not self._own(receiver.id) and receiver.id in self.context.values:
            known, reason = self.context.look_up(receiver.id, list(reversed(chain)))
            if reason is not None:
                self.refuse(node, f"hands on `{text_of(node)}` as a value, and a callable handed on is called: "
                                  f"{reason}")
                return
            if known:
                return
        if node.attr in system_attributes():
            self.refuse(node, f"takes `.{node.attr}`, a method of files, paths, processes or sockets, as a value")

    def _attribute(self, node: ast.Attribute) -> None:
        if node.attr.startswith("_"):
            self.refuse(node, f"reaches the private or dunder attribute `.{node.attr}`")

    def _expr_Subscript(self, node: ast.Subscript) -> None:
        self.expr(node.value)
        self.expr(node.slice)

    def _expr_Slice(self, node: ast.Slice) -> None:
        self._exprs([part for part in (node.lower, node.upper, node.step) if part is not None])

    def _expr_BinOp(self, node: ast.BinOp) -> None:
        folded = _fold(node)
        if folded is _TOO_BIG or (isinstance(folded, int) and abs(folded) > MAX_INT):
            self.refuse(node, f"the constant `{text_of(node)}` is larger than {MAX_INT}")
            return
        if isinstance(node.op, ast.Mult):
            for side in (node.left, node.right):
                count = _fold(side)
                if isinstance(count, int) and count > MAX_ELEMENTS:
                    self.refuse(node, f"repeats a sequence {_short(count)} times (more than {MAX_ELEMENTS})")
        self.expr(node.left)
        self.expr(node.right)

    def _expr_UnaryOp(self, node: ast.UnaryOp) -> None:
        self.expr(node.operand)

    def _expr_BoolOp(self, node: ast.BoolOp) -> None:
        self._exprs(node.values)

    def _expr_Compare(self, node: ast.Compare) -> None:
        self._exprs([node.left, *node.comparators])

    def _expr_IfExp(self, node: ast.IfExp) -> None:
        self._exprs([node.test, node.body, node.orelse])

    def _expr_Tuple(self, node: ast.Tuple | ast.List | ast.Set) -> None:
        self._exprs(node.elts)

    _expr_List = _expr_Set = _expr_Tuple

    def _expr_Dict(self, node: ast.Dict) -> None:
        self._exprs([k for k in node.keys if k is not None] + node.values)

    def _expr_Starred(self, node: ast.Starred) -> None:
        self.expr(node.value)

    def _expr_JoinedStr(self, node: ast.JoinedStr) -> None:
        self._exprs(node.values)

    def _expr_FormattedValue(self, node: ast.FormattedValue) -> None:
        self.expr(node.value)
        if node.format_spec is not None:
            self.expr(node.format_spec)

    def _expr_ListComp(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp) -> None:
        self._comprehension(node.generators, [node.elt])

    _expr_SetComp = _expr_GeneratorExp = _expr_ListComp

    def _expr_DictComp(self, node: ast.DictComp) -> None:
        self._comprehension(node.generators, [node.key, node.value])

    def _comprehension(self, generators: list[ast.comprehension], parts: list[ast.expr]) -> None:
        """The generators, then `parts` (element, key, value), with the comprehension's variables in scope."""
        self.scopes.append({n.id for g in generators for n in ast.walk(g.target) if isinstance(n, ast.Name)})
        for generator in generators:
            if generator.is_async:
                self.refuse(generator.iter, "an `async for` comprehension is not allowed without a person")
            self.target(generator.target, None)
            self.expr(generator.iter)
            self._exprs(generator.ifs)
        self._exprs(parts)
        self.scopes.pop()

    def _expr_Lambda(self, node: ast.Lambda) -> None:
        self.refuse(node, "a lambda that is not passed straight to a call")

    def _expr_Call(self, node: ast.Call) -> None:
        self._callee(node)
        for argument in [*node.args, *(k.value for k in node.keywords)]:
            if isinstance(argument, ast.Lambda):  # its parameters are in `bound`, so it cannot call them
                self._lambda_parameters(argument)
                self._exprs([d for d in [*argument.args.defaults, *argument.args.kw_defaults] if d is not None])
                self.scopes.append({a.arg for a in ast.walk(argument.args) if isinstance(a, ast.arg)})
                self.expr(argument.body)
                self.scopes.pop()
            else:
                self.expr(argument)
        self._sizes(node)

    def _lambda_parameters(self, node: ast.Lambda) -> None:
        for parameter in (a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)):
            if parameter in self.context.modules or parameter in self.imports or parameter.startswith("__"):
                self.refuse(node, f"a lambda parameter rebinds `{parameter}`")

    # -- calls

    def _callee(self, node: ast.Call) -> None:
        func = node.func
        text = text_of(func)
        root = root_name(func)
        if root is None:
            if isinstance(func, ast.Attribute):
                self._method(node, func)
            else:
                self.refuse(node, f"calls a computed callee `{text}`")
            return
        path = self.module_path(func)
        if path is not None and self.context.admits(path):  # first: an admitted callee keeps its bounds
            self._module_call(node, path, text)
        elif root not in self.bound and root not in self.imports and text in self.context.callables:
            if isinstance(func, ast.Attribute):  # the function's own call, on its own object or module
                self._attribute(func)
                if self.module_of(root) is None:
                    self.expr(func.value)
            self._program_reach(node, text)
        elif path is not None:
            self._module_call(node, path, text)
        elif isinstance(func, ast.Name):
            self._name_call(node, func)
        else:
            self._method(node, func)  # type: ignore[arg-type]

    def _program_reach(self, node: ast.Call, text: str) -> None:
        """A function of the program's own may be called unless it reaches the system: the repair would
        aim the program's effect (`save_snapshot(model, '/elsewhere')`)."""
        function = program_function(self.context.value_of(text), self.context.module)
        if function is None:
            return
        if self._reach is None:
            self._reach = Reach(self.context.values, self.context.module, self.context.modules)
        found = self._reach.function(function).found
        if found is not None:
            self.refuse(node, f"calls `{text}`, the program's own function, which reaches files, processes or the "
                              f"network: {found}")

    def _module_call(self, node: ast.Call, path: str, text: str) -> None:
        if not self.context.admits(path) and not self._made_again(node):
            self.refuse(node, f"calls `{text}` ({path}), which is not on the allowlist")
            return
        if path == "time.sleep":
            self._sleep(node)

    def _made_again(self, node: ast.Call) -> bool:
        """Whether `node` is a call the crashed statement made, with the same arguments, none of whose
        names the code binds or imports (`daifu.decide.made_calls`): it reaches what the program reached."""
        if ast.dump(node) not in self.context.made_calls:
            return False
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        return not any(self._own(name) or name in self.imports for name in names)

    def _name_call(self, node: ast.Call, func: ast.Name) -> None:
        name = func.id
        if name in self.bound:
            self.refuse(node, f"calls `{name}`, a name the code binds itself")
        elif self._is_builtin(name):
            if name not in BUILTINS and not is_exception_class(name):
                self.refuse(node, f"calls the builtin `{name}`, which is not on the allowlist")
            elif name == "iter" and len(node.args) != 1:
                self.refuse(node, "calls `iter` with a sentinel, an unbounded iterator")
            elif name == "range":
                self._range(node)
        else:
            self.refuse(node, f"calls `{name}`, which the function does not call itself")

    def _method(self, node: ast.Call, func: ast.Attribute) -> None:
        method = func.attr
        self._attribute(func)
        receiver = func.value
        if id(node) in self.backwards:
            pass  # the micro-batches' backward pass (`daifu.decide.allowlist_accumulate`)
        elif method in CONTAINER_METHODS and (
            method not in system_attributes() or self._holds(receiver, self.context.containers, self.made_containers)
        ):
            pass  # `append`, `setdefault` change what they are called on; `remove`, `copy` only on a known container
        elif method in METHODS or (method in self.context.methods and method not in system_attributes()):
            if method == "eval" and (node.args or node.keywords):
                self.refuse(node, "calls `.eval(...)` with arguments")
        elif method in CONTAINER_METHODS:
            self.refuse(
                node, f"calls `.{method}()` on `{text_of(receiver)}`, not a name known to hold a list, dict or set"
            )
        elif method in ("format", "format_map") and plain_template(receiver):
            pass  # its fields only name the values it is given: what an f-string of those values does
        elif method in STRING_METHODS:
            if not (isinstance(receiver, ast.Constant) and isinstance(receiver.value, str)) and not self._holds(
                receiver, self.context.strings, self.made_strings
            ):
                self.refuse(node, f"calls `.{method}()` on `{text_of(receiver)}`, not a name known to hold a str")
        elif method in self.context.methods and self._holds(receiver, self.context.arrays, set()):
            pass  # `copy`, `add`, `resize`: names the system's types share, on a tensor or array the frame holds
        else:
            self.refuse(node, f"calls the method `.{method}()`, which is not on the allowlist")
        self.expr(receiver)

    def _holds(self, receiver: ast.expr, known: frozenset[str], made: set[str]) -> bool:
        if not isinstance(receiver, ast.Name):
            return False
        return receiver.id in made or (receiver.id in known and receiver.id not in self.bound)

    def _sleep(self, node: ast.Call) -> None:
        seconds = _fold(node.args[0]) if len(node.args) == 1 and not node.keywords else None
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not 0 <= seconds <= MAX_SLEEP_S:
            self.refuse(node, f"`time.sleep` needs one literal number of seconds, at most {MAX_SLEEP_S}")

    def _range(self, node: ast.Call) -> None:
        for argument in node.args:
            value = _fold(argument)
            if value is _TOO_BIG or (isinstance(value, int) and abs(value) > MAX_RANGE):
                self.refuse(node, f"`range` over the literal {text_of(argument)} (more than {MAX_RANGE})")

    def _sizes(self, node: ast.Call) -> None:
        """The integer literals of one call (positional, in tuples and lists, `size=`) multiply to a bound."""
        literals = [_fold(a) for a in _size_arguments(node, self.module_path(node.func))]
        if any(v is _TOO_BIG for v in literals):
            self.refuse(node, f"`{text_of(node.func)}` gets a literal beyond any bound")
            return
        product = 1
        for value in literals:
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                product *= value
        if product > MAX_ELEMENTS:
            self.refuse(
                node,
                f"`{text_of(node.func)}` gets literal sizes of {_short(product)} elements (more than {MAX_ELEMENTS})",
            )

    # -- modules

    def module_of(self, name: str) -> str | None:
        """The module `name` stands for here, if it stands for one."""
        if name in self.imports:
            meaning = self.imports[name]
            return meaning if meaning in IMPORTS or not self._admitted(meaning) else None
        return self.context.modules.get(name)  # a module name the code rebinds is refused where it does

    def module_path(self, node: ast.expr) -> str | None:
        """The dotted path of `node` when it is an attribute chain rooted at a module (`F.relu` -> ...)."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        if not parts and node.id in self.imports:
            return self.imports[node.id]
        if not parts and node.id in self.context.paths and node.id not in self.bound:
            return self.context.paths[node.id]  # `sleep`, from a user's `from time import sleep`
        module = self.module_of(node.id)
        if module is None:
            return None
        return ".".join([module, *reversed(parts)])


def import_meaning(alias: ast.alias) -> tuple[str, str]:
    """The name `import a.b [as c]` binds, and the module it binds it to (`a.b` with `as`, else `a`)."""
    top = alias.name.split(".")[0]
    return (alias.asname, alias.name) if alias.asname else (top, top)


def _bindings(node: ast.AST) -> list[tuple[ast.expr, ast.expr | None]]:
    """The (target, value) pairs a node binds; the value is `None` where it is not one expression."""
    if isinstance(node, ast.Assign):
        return [(target, node.value) for target in node.targets]
    if isinstance(node, ast.AnnAssign):
        return [(node.target, node.value)]
    if isinstance(node, (ast.AugAssign, ast.For, ast.comprehension)):
        return [(node.target, None)]
    if isinstance(node, ast.withitem) and node.optional_vars is not None:
        return [(node.optional_vars, None)]
    return []


def _size_arguments(node: ast.Call, path: str | None) -> Iterator[ast.expr]:
    """The arguments of a call that may be sizes: integers, tuple and list elements, `size=`/`shape=`."""
    plain = path not in BOUNDS_NOT_SIZES
    for argument in [*node.args, *(k.value for k in node.keywords if k.arg in ("size", "shape", None))]:
        if isinstance(argument, (ast.Tuple, ast.List)):
            yield from argument.elts
        elif plain:
            yield argument


class _TooBig:
    """A folded constant too large to compute (`10**10**10`)."""


_TOO_BIG = _TooBig()


def _fold(node: ast.expr) -> int | float | _TooBig | None:
    """The value of a constant arithmetic expression, computed only where it stays small."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, (int, float)) and not isinstance(node.value, bool) else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _fold(node.operand)
        return -value if isinstance(node.op, ast.USub) and isinstance(value, (int, float)) else value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("int", "round"):
        value = _fold(node.args[0]) if len(node.args) == 1 else None
        return int(value) if isinstance(value, float) and math.isfinite(value) else value
    if not isinstance(node, ast.BinOp):
        return None
    left, right = _fold(node.left), _fold(node.right)
    if left is _TOO_BIG or right is _TOO_BIG:
        return _TOO_BIG
    if not isinstance(left, (int, float)) or not isinstance(right, (int, float)):
        return None
    return _apply(node.op, left, right)


_OPERATIONS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.truediv,
    ast.Mod: operator.mod,
}


def _apply(op: ast.operator, left: float, right: float) -> int | float | _TooBig | None:
    """`left op right`, or `_TOO_BIG` for a power or shift whose result would run to thousands of bits."""
    bits = abs(left).bit_length() if isinstance(left, int) else 64
    if (isinstance(op, ast.Pow) and abs(left) > 1 and right * bits > 4096) or (
        isinstance(op, ast.LShift) and right > 4096
    ):
        return _TOO_BIG
    operation = _OPERATIONS.get(type(op))
    try:
        return None if operation is None else operation(left, right)
    except (ArithmeticError, ValueError, TypeError):
        return None


def root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def is_exception_class(name: str) -> bool:
    value = builtins.__dict__.get(name)
    return isinstance(value, type) and issubclass(value, BaseException)


def text_of(node: ast.AST) -> str:
    try:
        text = ast.unparse(node)
    except (RecursionError, ValueError):
        text = type(node).__name__
    return text if len(text) <= 80 else text[:77] + "..."


def _construct(node: ast.AST) -> str:
    names = {
        "While": "while",
        "FunctionDef": "def",
        "AsyncFunctionDef": "async def",
        "ClassDef": "class",
        "Global": "global",
        "Nonlocal": "nonlocal",
        "AsyncFor": "async for",
        "AsyncWith": "async with",
        "Await": "await",
        "Yield": "yield",
        "YieldFrom": "yield from",
        "NamedExpr": ":=",
        "Match": "match",
        "TryStar": "try/except*",
    }
    return names.get(type(node).__name__, type(node).__name__)


def _listed(names: frozenset[str]) -> str:
    return ", ".join(sorted(names))


def _short(value: int) -> str:
    text = str(value)
    return text if len(text) <= 20 else f"about 10**{len(text) - 1}"


def parse_code(code: str, what: str, first_lineno: int | None = None) -> ast.Module | str:
    """The module `code` parses to, or why it cannot be read: its line as the file's when the code
    starts at file line `first_lineno`, else as the code's own (`line 2 of the action`)."""
    if len(code) > MAX_CODE:
        return f"{what} is longer than {MAX_CODE} characters"
    try:
        return ast.parse(textwrap.dedent(code))
    except SyntaxError as error:
        line = error.lineno or 1
        where = f"line {first_lineno + line - 1}" if first_lineno is not None else f"line {line} of {what}"
        return f"{what} does not parse: {error.msg} ({where})"
    except (RecursionError, MemoryError, ValueError) as error:
        return f"{what} cannot be read: {type(error).__name__}"


@functools.lru_cache(maxsize=16)
def parse_running(source: str) -> ast.Module | str:
    """`parse_code` of the running function's `source`, kept per source: the checks only read that tree,
    and what the flow analysis finds in it is kept per tree (`daifu.decide.allowlist_flow`), so a repair
    checked again at the same version (a repeat of a crash, another candidate) finds it ready."""
    return parse_code(source, "the function")


def plain_template(node: ast.expr) -> bool:
    """Whether `node` is a literal format string whose every field names a value by position or name, with no
    attribute or item read (`'{0.__globals__}'`, `'{m[key]}'`) and no field nested in a spec: formatted, it
    reads nothing but the values it is given, as an f-string of them does."""
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return False
    try:
        fields = list(string.Formatter().parse(node.value))
    except ValueError:
        return False
    return all(name is None or (_PLAIN_FIELD.fullmatch(name) is not None and "{" not in (spec or ""))
               for _, name, spec, _ in fields)
