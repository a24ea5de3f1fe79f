"""The code transformation: the vaccinated fast path, and continuations that resume mid-function.

Generated names start with `@`, which no user can write (pytest's `@py_assert` habit). Generated
code reaches the runtime through `@rt`, one constant of the compiled code (see
`daifu.core.compiling`), and keeps, beside the user's own locals:

- `@itD`     the iterator of the `for` loop at loop depth D, so a resume can continue that loop;
- `@cmD`     the context manager of the `with` at depth D, and `@exD` its type's `__exit__`, so a
             resume can exit it exactly once (`daifu.core.guard`); `@okD` says whether the body
             finished without an exception (then its `finally` calls `__exit__`), `@wD` is the
             exception leaving the body, and `@en` the manager's `__enter__`, then what it returned;
- `@pending` a `Handover` in flight, which disarms the user's `finally` clauses on its way out;
- `@fxK`, `@fpK` for the K-th `try ... finally` of the function: the exception being handled
  around it, and what its `finally` clause is finishing (a pending exception, `return` value,
  `break` or `continue`), so a run resumed inside a `finally` clause does it afterwards;
- `@rv`      a returned value on its way through `finally` clauses;
- `@e`, `@h`, `@k`, `@ns`, `@once` short-lived temporaries of the catchers and continuations.

Catchers (`try: ... except Exception`) sit only where an exception must be stopped before user
machinery sees it: the function body, every `with` body, and the blocks of a `try` with a
`finally`. Loop and `if` bodies need none: an exception leaves them without side effects, and the
loop's iterator survives in `@itD`. Since Python 3.11 a `try` costs nothing until it raises.

Each version has one continuation that resumes anywhere (`Rewriter.anywhere`), compiled with it, so
a first crash compiles nothing; one for a single site (`Rewriter.continuation`) is compiled where
that one does not serve: in a surgery's new version, to skip an iteration, in a flavour below.
Inside a loop, that one is a *segment* (`Rewriter.segment`): the rest of the interrupted iteration,
which calls `@rt.switch` where the code it leaves out starts, to hand over to the continuation
from there, compiled only then.

A continuation may be built in two more flavours, which change only the innermost loop it
resumes: the *trial* flavour (`daifu.core.trial`) signals `@rt.trial_end()` where the interrupted
iteration is over, `@rt.trial_iteration()` at the start of each remaining iteration and
`@rt.trial_loop_end()` after the loop, so that a trial of a repair can look along the loop as far as
its horizon (`daifu.core.horizon`); the *watched* flavour
calls `@rt.watch()` at the start of each remaining iteration, so the iterations after an
automatic repair are watched (`daifu.decide.watch`) — a call that does nothing once the watch is over.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, replace
from functools import cached_property
from enum import Enum
from typing import TYPE_CHECKING, TypeVar
from collections.abc import Callable, Mapping

from daifu.core.blocks import COMPOUND, TRY, Path, block_of, child_blocks, path_of
from daifu.core.compiling import RUNTIME, located, no_arguments
from daifu.core.compiling import place as _at
from daifu.core.guard import LEAVES_FRAMES_OUT

if TYPE_CHECKING:
    from daifu.core.account import Probe


N = TypeVar("N", bound=ast.AST)
Resumed = Callable[[list[ast.stmt], "_Depth"], list[ast.stmt]]
"""Builds the remainder of a block a continuation enters, given the block and the depth inside it."""


class Mode(Enum):
    """Where, relative to the statement at a path, a continuation starts."""

    AT = "at"  # run the statement (again)
    ABOVE = "above"  # run it after exiting the `with` statements a crash below it left open (a surgery's)
    AFTER = "after"  # run what follows it
    LOOP_NEXT = "loop-next"  # a `for` header: ask the same iterator for its next item
    LOOP_EXHAUSTED = "loop-exhausted"  # a loop header: end the loop as if exhausted (run `else`)
    NEXT_ITERATION = "next-iteration"  # leave the rest of the innermost loop's iteration (a `continue`)


class Flavour(Enum):
    """What a continuation adds at its innermost resumed loop (see the module docstring)."""

    PLAIN = "plain"
    TRIAL = "trial"
    WATCHED = "watched"


class CannotResume(Exception):
    """The requested resume point cannot be reached; the message says why."""


@dataclass(frozen=True)
class Scope:
    """What the generated code must know about the function's variables.

    cell_names: the cell and free variables, handed to the runtime on a crash so that a
        continuation shares them (closures keep seeing rebinds).
    own_cells: those of `cell_names` that are the function's own cell variables (captured by a
        nested function, lambda or comprehension): a continuation declares them `nonlocal`, so
        that rebinding one rebinds the crashed frame's cell.
    plain_locals: the other local variables, loaded into a continuation from the snapshot.
    declared: `global` / `nonlocal` statements, repeated at the top of a continuation.
    finals: how many `try ... finally` statements the function has.
    receiver: the parameter a zero-argument `super()` in the function reads (its first positional
        one, when it has a `__class__` cell): a continuation takes its value as its first parameter,
        `@self`, since `super()` reads a frame's first local, whatever its name.
    """

    cell_names: tuple[str, ...]
    own_cells: tuple[str, ...]
    plain_locals: tuple[str, ...]
    declared: tuple[ast.stmt, ...]
    finals: int
    receiver: str | None = None

    @cached_property
    def finally_states(self) -> tuple[str, ...]:
        """The `@fxK` / `@fpK` locals of `plain_locals`: a snapshot taken outside a `finally` lacks
        them, and a continuation's prologue loads them all."""
        return tuple(name for name in self.plain_locals if name.startswith(("@fx", "@fp")))


def _same_but_locals(old: Scope, new: Scope) -> bool:
    """Whether two scopes differ at most in their plain locals."""
    return old is new or replace(old, plain_locals=new.plain_locals) == new


@dataclass(frozen=True)
class _Depth:
    """Where generated code sits: loop and `with` nesting, and the user's handlers around it.

    `passed` are the exception types of the user's `except` clauses whose `try` body encloses
    this point: a catcher lets those through to them. `caught_all`: one of them is a bare
    `except`, `except Exception` or `except BaseException`, so nothing here is ever a crash.
    `finals`: the numbers of the `try ... finally` statements whose `finally` clause runs when
    control leaves this point; `loop_finals`: how many of them are outside the innermost loop
    (a `break` or `continue` passes through the others only).
    """

    loops: int = 0
    withs: int = 0
    passed: tuple[ast.expr, ...] = ()
    caught_all: bool = False
    finals: tuple[int, ...] = ()
    loop_finals: int = 0
    in_loop: bool = False

    def inside_try(self, node: ast.stmt) -> _Depth:
        handlers = getattr(node, "handlers", [])
        if not handlers:
            return self
        return replace(
            self,
            passed=self.passed + tuple(h.type for h in handlers if h.type is not None),
            caught_all=self.caught_all or any(_is_catch_all(h) for h in handlers),
        )

    def inside_loop(self, node: ast.stmt) -> _Depth:
        loops = self.loops + 1 if isinstance(node, ast.For) else self.loops
        return replace(self, loops=loops, loop_finals=len(self.finals), in_loop=True)

    def inside_final(self, node: ast.stmt) -> _Depth:
        """Inside the body, a handler or the `else` of a `try ... finally`."""
        return replace(self, finals=self.finals + (final_number(node),))


@dataclass(frozen=True)
class _Segment:
    """The segment being built (`Rewriter.segment`): the path length of the innermost loop around
    its resume point (statements at that depth and above have what follows them switched), and
    the number of the version it belongs to."""

    depth: int
    version: int


def _innermost_loop(fdef: ast.FunctionDef, path: Path) -> ast.For | ast.While | None:
    """The innermost loop whose body holds the statement at `path`."""
    found = None
    block: list[ast.stmt] = fdef.body
    for position in range(0, len(path) - 1, 2):
        node, field = block[path[position]], path[position + 1]
        if isinstance(node, (ast.For, ast.While)) and field == "body":
            found = node
        block = block_of(node, field)
    return found


def final_number(node: ast.stmt) -> int:
    """The number K of a `try ... finally` statement, stamped by `number_finals`."""
    return int(getattr(node, "_daifu_final"))  # noqa: B009 - an attribute of ours, not of `ast`  # type: ignore[attr-defined,no-any-return]


def number_finals(statements: list[ast.stmt]) -> int:
    """Number the `try ... finally` statements among `statements` (in order); return how many."""
    count = 0
    for statement in statements:
        if isinstance(statement, TRY) and statement.finalbody:
            setattr(statement, "_daifu_final", count)  # noqa: B010 - an attribute of ours, not of `ast`
            count += 1
    return count


def unseen(body: list[ast.stmt]) -> list[ast.stmt]:
    """`body` in a `try` whose handler leaves the frame running it out of an exception's traceback
    (`guard.unseen`), where Python can (3.11 on): the frame that runs a repaired call's continuations,
    and a surgery's stub, run at the `def` line and show nothing of the user's."""
    if not LEAVES_FRAMES_OUT:
        return body
    handler = ast.ExceptHandler(type=_rt("BaseException"), name="@e",
                                body=[ast.Expr(_call("unseen", _name("@e"))), ast.Raise()])
    return [ast.Try(body=body, handlers=[handler], orelse=[], finalbody=[])]


def _name(identifier: str, store: bool = False) -> ast.Name:
    return ast.Name(id=identifier, ctx=ast.Store() if store else ast.Load())


def _rt(attribute: str) -> ast.Attribute:
    return ast.Attribute(value=ast.Constant(RUNTIME), attr=attribute, ctx=ast.Load())


def _call(attribute: str, *arguments: ast.expr) -> ast.Call:
    return ast.Call(func=_rt(attribute), args=list(arguments), keywords=[])


def _assign(identifier: str, value: ast.expr) -> ast.Assign:
    return ast.Assign(targets=[_name(identifier, store=True)], value=value)


def _none() -> ast.Constant:
    return ast.Constant(value=None)


def _is(identifier: str, negate: bool = False) -> ast.Compare:
    return ast.Compare(left=_name(identifier), ops=[ast.IsNot() if negate else ast.Is()], comparators=[_none()])


def _to_at_most(point: int) -> ast.Compare:
    """`@to <= point`: the resume point is at or before `point` (see `Rewriter.anywhere`)."""
    return ast.Compare(left=_name("@to"), ops=[ast.LtE()], comparators=[ast.Constant(point)])


def _clear_namespace() -> ast.stmt:
    """`@ns.clear()`: the end of a prologue; the snapshot no longer holds what the frame holds now."""
    clear = ast.Attribute(value=_name("@ns"), attr="clear", ctx=ast.Load())
    return ast.Expr(ast.Call(func=clear, args=[], keywords=[]))


def _is_catch_all(handler: ast.ExceptHandler) -> bool:
    return handler.type is None or (
        isinstance(handler.type, ast.Name) and handler.type.id in ("BaseException", "Exception")
    )


def _def_line(fdef: ast.FunctionDef) -> ast.AST:
    """A place on the `def` line only: where the statements about the whole call are shown."""
    spot = ast.Pass()
    spot.lineno = spot.end_lineno = fdef.lineno
    spot.col_offset, spot.end_col_offset = fdef.col_offset, fdef.col_offset + 3
    return spot


def _entering(item: ast.withitem, d: int) -> tuple[list[ast.stmt], list[ast.stmt]]:
    """The `with` at depth `d` entering its manager: `@cmD = <expression>`, `@exD` and `@en` looked
    up on its type (a `TypeError` if it is no context manager), `@en(@cmD)`, `@okD = True`; then,
    first in the protected body, what binds the `as` target (an error there exits, as in a `with`)."""
    manager = f"@cm{d}"
    on_type: list[ast.stmt] = [
        _assign("@en", _call("type", _name(manager))),
        _assign(f"@ex{d}", ast.Attribute(value=_name("@en"), attr="__exit__", ctx=ast.Load())),
        _assign("@en", ast.Attribute(value=_name("@en"), attr="__enter__", ctx=ast.Load())),
    ]
    not_a_manager = ast.ExceptHandler(type=_rt("AttributeError"), name=None,
                                      body=[ast.Expr(_call("no_protocol", _name(manager)))])
    lookup = ast.Try(body=on_type, handlers=[not_a_manager], orelse=[], finalbody=[])
    enter = ast.Call(func=_name("@en"), args=[_name(manager)], keywords=[])
    target = item.optional_vars
    entered = ast.Expr(enter) if target is None else _assign("@en", enter)
    setup = [_assign(manager, item.context_expr), lookup, entered, _assign(f"@ok{d}", ast.Constant(True))]
    if target is None:
        return _at(setup, item.context_expr), []
    bind: list[ast.stmt] = [ast.Assign(targets=[target], value=_name("@en")), _assign("@en", _none())]
    return _at(setup, item.context_expr), _at(bind, target)


def _exiting(d: int) -> tuple[ast.ExceptHandler, ast.stmt]:
    """The exits of the `with` at depth `d`: the handler of an exception leaving its body (`@wD`),
    which exits with it unless it is a `Handover`, and the `finally` statement, which exits when
    the body finished (`@okD`) and marks an error of `__exit__` passed."""
    manager, exit_method, finished, leaving = f"@cm{d}", f"@ex{d}", f"@ok{d}", f"@w{d}"
    handed_over = _call("isinstance", _name(leaving), _rt("Handover"))
    suppressed = _call("exited", _name(exit_method), _name(manager), _name(leaving))
    goes_on = ast.BoolOp(op=ast.Or(), values=[handed_over, ast.UnaryOp(op=ast.Not(), operand=suppressed)])
    on_error = ast.ExceptHandler(type=_rt("BaseException"), name=leaving, body=[
        _assign(finished, ast.Constant(False)), ast.If(test=goes_on, body=[ast.Raise()], orelse=[]),
    ])
    exit_call = ast.Call(func=_name(exit_method), args=[_name(manager), _none(), _none(), _none()], keywords=[])
    passed = ast.ExceptHandler(type=_rt("BaseException"), name=leaving,
                               body=[ast.Expr(_call("mark_passed", _name(leaving))), ast.Raise()])
    exit_once = ast.Try(body=[ast.Expr(exit_call)], handlers=[passed], orelse=[], finalbody=[])
    return on_error, ast.If(test=_name(finished), body=[exit_once], orelse=[])


class Rewriter:
    """Builds vaccinated statement lists for one version of a function.

    `flavour`: of the continuations it builds (see the module docstring); `_flavoured` is set while the
    innermost resumed loop still has to receive what the flavour adds.
    """

    def __init__(self, scope: Scope, flavour: Flavour = Flavour.PLAIN, forms_of: Rewriter | None = None,
                 probes: Mapping[int, Probe] | None = None) -> None:
        self.scope = scope
        self.flavour = flavour
        self.probes: Mapping[int, Probe] = probes or {}
        self._flavoured = False
        self._prologue: list[ast.stmt] | None = None
        self._statements: dict[tuple[int, _Depth], list[ast.stmt]] = {}
        if forms_of is not None and forms_of.flavour is flavour and _same_but_locals(forms_of.scope, scope):
            # A version derived from an older one, with its scope but maybe new plain locals, which
            # no statement's form names: the forms of the statements whose nodes they share (all but
            # those spliced in, `daifu.core.splice`; none when the new tree was parsed) are the same.
            # Keyed by node identity, and the older tree lives on with its version, so no key can
            # name another node.
            self._statements = dict(forms_of._statements)
        self._segment: _Segment | None = None

    # -- catchers -------------------------------------------------------------------------

    def _cells(self) -> ast.Lambda:
        """`lambda: (cell, ...)` over the function's cell variables: the runtime reads the cells
        themselves from its closure (`resume._snapshot`)."""
        cells = ast.Tuple(elts=[_name(n) for n in self.scope.cell_names], ctx=ast.Load())
        return ast.Lambda(args=no_arguments(), body=cells)

    def _crash_call(self) -> ast.stmt:
        arguments: list[ast.expr] = [_name("@e")]
        if self.scope.cell_names:
            arguments.append(self._cells())
        return ast.Expr(_call("crash", *arguments))

    def catcher(self, body: list[ast.stmt], where: ast.AST, depth: _Depth) -> list[ast.stmt]:
        """`body` inside `try/except Exception`: an escaping exception is offered as a crash.

        Exceptions that one of the user's own handlers around `body` will catch go through.
        """
        if not body or depth.caught_all:
            return body
        handler_body: list[ast.stmt] = []
        passed = list(depth.passed)
        if passed:
            types = ast.Tuple(elts=passed, ctx=ast.Load()) if len(passed) > 1 else passed[0]
            handler_body.append(ast.If(test=_call("isinstance", _name("@e"), types), body=[ast.Raise()], orelse=[]))
        handler_body += [self._crash_call(), ast.Raise()]
        handler = ast.ExceptHandler(type=_rt("Exception"), name="@e", body=handler_body)
        return _at([ast.Try(body=body, handlers=[handler], orelse=[], finalbody=[])], where)

    # -- statements -----------------------------------------------------------------------

    def block(self, statements: list[ast.stmt], depth: _Depth) -> list[ast.stmt]:
        """The fast-path form of a statement list."""
        result: list[ast.stmt] = []
        for statement in statements:
            result += self.statement(statement, depth)
        return result

    def statement(self, node: ast.stmt, depth: _Depth) -> list[ast.stmt]:
        """The fast-path form of one statement, built once: continuations share it (compiling
        reads a tree and never changes it), so a continuation builds little beyond its own seams."""
        key = (id(node), depth)
        if key not in self._statements:
            forms = self._statement(node, depth)
            probe = self.probes.get(id(node))
            self._statements[key] = forms if probe is None else self._probed(node, probe, forms)
        return self._statements[key]

    def _probed(self, node: ast.stmt, probe: Probe, forms: list[ast.stmt]) -> list[ast.stmt]:
        """A surgery's statement counted each time it runs (`daifu.core.account`): `@rt.passed(...)`
        before a jump; `@rows = @rt.rows_before(names)` before a rebinding, and after it
        `@rows = @rt.rows_after(..., @rows)`, which compares and releases what the names held."""
        path = ast.Tuple(elts=[ast.Constant(step) for step in path_of(node)], ctx=ast.Load())
        number = ast.Constant(probe.number)
        cells = [self._cells()] if self.scope.cell_names else []
        if probe.how != "rows":
            return _at([ast.Expr(_call("passed", number, path, *cells))], node) + forms
        names = ast.Tuple(elts=[ast.Constant(name) for name in probe.names], ctx=ast.Load())
        before = _at([_assign("@rows", _call("rows_before", names))], node)
        after = _at([_assign("@rows", _call("rows_after", number, path, _name("@rows"), *cells))], node)
        return before + forms + after

    def _statement(self, node: ast.stmt, depth: _Depth) -> list[ast.stmt]:
        if isinstance(node, ast.For):
            return self._for(node, depth, self._fresh_iterator(node, depth))
        if isinstance(node, ast.While):
            return [self._while(node, depth)]
        if isinstance(node, ast.If):
            return [self._copy(node, body=self.block(node.body, depth), orelse=self.block(node.orelse, depth))]
        if isinstance(node, ast.With):
            return self._with(node, depth)
        if isinstance(node, ast.Match):
            cases = [self._copy(case, body=self.block(case.body, depth)) for case in node.cases]
            return [self._copy(node, cases=cases)]
        if isinstance(node, TRY):
            return self._try(node, depth, self.block(node.body, self._try_depth(node, depth)), fresh=True)
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return _at([ast.Pass()], node)  # hoisted to the top of the function: see Scope.declared
        if isinstance(node, ast.Return) and depth.finals:
            return self._return_through_finals(node, depth)
        if isinstance(node, (ast.Break, ast.Continue)) and depth.finals[depth.loop_finals :]:
            kind = "break" if isinstance(node, ast.Break) else "continue"
            return self._mark(depth.finals[depth.loop_finals :], ast.Constant(kind), _none(), node) + [node]
        return [node]

    @staticmethod
    def _copy(node: N, **fields: object) -> N:
        fresh = copy.copy(node)
        for key, value in fields.items():
            setattr(fresh, key, value)
        return fresh

    def _mark(self, finals: tuple[int, ...], kind: ast.expr, value: ast.expr, where: ast.AST) -> list[ast.stmt]:
        """`@fpK = (kind, value)` for each `finally` clause control is about to pass through."""
        marker = ast.Tuple(elts=[kind, value], ctx=ast.Load())
        targets: list[ast.expr] = [_name(f"@fp{k}", store=True) for k in finals]
        return _at([ast.Assign(targets=targets, value=marker)], where)

    def _return_through_finals(self, node: ast.Return, depth: _Depth) -> list[ast.stmt]:
        """`return X` as `@rv = X; @fpK = ("return", @rv); return @rv`: the value survives a resume."""
        value = _assign("@rv", node.value or _none())
        marks = self._mark(depth.finals, ast.Constant("return"), _name("@rv"), node)
        return _at([value], node) + marks + _at([ast.Return(value=_name("@rv"))], node)

    def _fresh_iterator(self, node: ast.For, depth: _Depth) -> ast.expr:
        walrus = ast.NamedExpr(target=_name(f"@it{depth.loops}", store=True), value=_call("iter", node.iter))
        return _at([walrus], node.iter)[0]  # type: ignore[no-any-return]

    def _for(self, node: ast.For, depth: _Depth, iterable: ast.expr) -> list[ast.stmt]:
        _at([iterable], node.iter)
        body = self.block(node.body, depth.inside_loop(node))
        loop = self._copy(node, iter=iterable, body=body, orelse=self.block(node.orelse, depth))
        variable = f"@it{depth.loops}"
        reset = _at([_assign(variable, _none())], node)  # a stale iterator must never be resumed
        fresh = isinstance(iterable, ast.NamedExpr)
        return (reset if fresh else []) + [loop] + _at([_assign(variable, _none())], node)

    def _while(self, node: ast.While, depth: _Depth) -> ast.stmt:
        body = self.block(node.body, depth.inside_loop(node))
        return self._copy(node, body=body, orelse=self.block(node.orelse, depth))

    def _with(self, node: ast.With, depth: _Depth) -> list[ast.stmt]:
        """A `with`, its context manager protocol run inline as PEP 343 spells it out.

        Not a `with` statement: the body can then be left by a `Handover` without exiting, and
        the continuation that finishes the body exits it (`daifu.core.guard`). Inline, the protocol
        costs what a `with` statement costs. As in a `with` statement, `__exit__` runs when the body
        is left in any way other than by a `Handover`, once: with the exception that leaves it
        (`exited`, which marks an error of `__exit__` itself passed), else from the `finally`.
        """
        item, d = node.items[0], depth.withs
        setup, bind = _entering(item, d)
        inner = replace(depth, withs=d + 1)
        body = self.catcher(self.block(node.body, inner), node, inner) or [ast.Pass()]
        on_error, on_leaving = _exiting(d)
        statement = ast.Try(body=bind + body, handlers=[on_error], orelse=[], finalbody=[on_leaving])
        return setup + _at([statement], node)

    @staticmethod
    def _try_depth(node: ast.stmt, depth: _Depth) -> _Depth:
        inner = depth.inside_try(node)
        return inner.inside_final(node) if getattr(node, "finalbody", None) else inner

    def _try(self, node: ast.Try, depth: _Depth, body: list[ast.stmt], fresh: bool) -> list[ast.stmt]:
        """A `try`, with the user's own handlers first in line and its `finally` disarmable.

        `fresh`: the `try` statement starts here (the fast path), rather than being resumed
        inside its body; only a fresh one sets up what its `finally` clause will finish.
        """
        is_star = not isinstance(node, ast.Try)
        body = body or _at([ast.Pass()], node)
        around = depth.inside_final(node) if node.finalbody else depth
        handlers = [self._copy(h, body=self._handler_body(h, node, around)) for h in node.handlers]
        orelse = self.block(node.orelse, around)
        if node.finalbody:
            orelse = self.catcher(orelse, node, around)
        if node.finalbody and not is_star:
            body = self.catcher(body, node, around.inside_try(node))
        if handlers and not is_star:
            let_through = ast.ExceptHandler(type=_rt("Handover"), name=None, body=[ast.Raise()])
            handlers = _at([let_through], node) + handlers
        if not node.finalbody:
            return [self._copy(node, body=body, handlers=handlers, orelse=orelse)]
        inner: list[ast.stmt] = (
            [self._copy(node, body=body, handlers=handlers, orelse=orelse, finalbody=[])] if handlers else body
        )
        k = final_number(node)
        final = _at([ast.If(test=_is(f"@fp{k}"), body=[_assign(f"@fp{k}", _call("pending", _name(f"@fx{k}")))],
                            orelse=[])], node) + self.block(node.finalbody, depth)
        setup = _at([_assign(f"@fx{k}", _call("handled")), _assign(f"@fp{k}", _none())], node) if fresh else []
        return setup + self._disarmable(inner, final, node)

    def _handler_body(self, handler: ast.ExceptHandler, node: ast.Try, depth: _Depth) -> list[ast.stmt]:
        return self.catcher(self.block(handler.body, depth), handler, depth)

    def _disarmable(self, inner: list[ast.stmt], final: list[ast.stmt], where: ast.AST) -> list[ast.stmt]:
        """`try: inner finally: final`, where a `Handover` passing through skips `final`.

        The continuation that takes over runs its own copy of the `finally`, at the right time.
        """
        store = ast.ExceptHandler(type=_rt("Handover"), name="@h", body=[_assign("@pending", _name("@h"))])
        guarded_final = ast.If(test=_is("@pending"), body=final or [ast.Pass()], orelse=[])
        outer = ast.Try(body=inner, handlers=[store], orelse=[], finalbody=[guarded_final])
        relay = ast.If(test=_is("@pending", negate=True), body=[ast.Raise(exc=_name("@pending"))], orelse=[])
        _at([store, relay], where)
        _at([outer, guarded_final], where)
        return [outer, relay]

    # -- whole functions ------------------------------------------------------------------

    def _frame(self, body: list[ast.stmt], fdef: ast.FunctionDef, in_continuation: bool) -> list[ast.stmt]:
        """The function-level catcher, and the hand-over to a continuation.

        The fast path runs the continuations itself, one after the other (a continuation that
        crashes and is repaired hands over to the next), so no frame of DaiFu's sits between the
        user's callers and the continuation in a traceback, and the stack does not grow.
        """
        caught = self.catcher(body, fdef, _Depth()) or _at([ast.Pass()], fdef)
        # The hand-over is caught as `@e`, the catchers' name, and the fast path releases only the
        # locals it has (not `@call`, which only continuations hold): every local of the frame is
        # set up and cleared at every call of the function, crash or not.
        if in_continuation:
            handover_body: list[ast.stmt] = [ast.Return(value=_name("@e"))]
            after: list[ast.stmt] = []
        else:
            released = [_assign(name, _none()) for name in self.scope.plain_locals if name != "@call"]
            handover_body = [_assign("@k", _name("@e")), *released]
            run = ast.Call(func=ast.Attribute(value=_name("@k"), attr="continuation", ctx=ast.Load()),
                           args=[ast.Call(func=ast.Attribute(value=_name("@k"), attr="start", ctx=ast.Load()),
                                          args=[], keywords=[])], keywords=[])
            finished = ast.UnaryOp(op=ast.Not(), operand=_call("isinstance", _name("@k"), _rt("Handover")))
            loop = ast.While(test=ast.Constant(True), body=[*unseen([_assign("@k", run)]), ast.If(
                test=finished, body=[ast.Return(value=_name("@k"))], orelse=[])], orelse=[])
            after = _at([loop], _def_line(fdef))
        handover = ast.ExceptHandler(type=_rt("Handover"), name="@e", body=handover_body)
        top = ast.Try(body=caught, handlers=[handover], orelse=[ast.Return(value=_none())], finalbody=[])
        prelude = [_assign("@pending", _none())] if self.scope.finals else []
        return _at(prelude + [top], fdef) + after

    def fast_path(self, fdef: ast.FunctionDef) -> ast.FunctionDef:
        """The vaccinated function: the user's code, plus catchers that cost nothing until a crash."""
        declared = list(self.scope.declared)
        body = declared + self._frame(self.block(fdef.body, _Depth()), fdef, in_continuation=False)
        return self._copy(fdef, body=body)

    def continuation(self, fdef: ast.FunctionDef, path: Path, mode: Mode) -> ast.FunctionDef:
        """A function of one argument, the locals snapshot, that runs `fdef` from `path` on.

        It finishes the invocation: the rest of the block that crashed, then the rest of every
        enclosing block, resumed loops running their remaining iterations with the saved
        iterators and resumed `with` blocks exiting through their saved guards.
        """
        self._flavoured = self.flavour is not Flavour.PLAIN
        return self._definition(fdef, self._rest(fdef.body, path, mode, _Depth()), ("@ns",))

    def segment(self, fdef: ast.FunctionDef, path: Path, mode: Mode, version: int, present: tuple[str, ...]
                ) -> ast.FunctionDef | None:
        """A continuation that holds only the rest of the interrupted iteration of the innermost
        loop around `path` (resumed `Mode.AT`, `Mode.ABOVE` or `Mode.AFTER`); `None` when no loop's
        body holds it.

        A per-site continuation holds every loop's body two or three times (the rest of the
        iteration, the remaining iterations, the enclosing loop's iterations); a segment holds the
        first only, so it compiles in a fraction of the time. Each piece of code it leaves out,
        at the loop and at every level around it — a loop's remaining iterations, the statements
        after a resumed statement — is replaced by `@rt.switch(version, path, mode, cells)` where
        that piece starts, which hands the run over (a `Handover`, as a repair does) to the
        continuation that resumes at that point, compiled then (`Vaccine.switch`). Control reaches
        a switch only by falling off, `break`ing or `continue`ing where the left-out code would
        have run: an exception or a `return` leaves through the enclosing statements, which the
        segment holds, as it would have.

        `present`: the locals the snapshot it resumes holds. A segment serves one snapshot's
        names, so its prologue loads them in one statement (`_load_present`) instead of testing
        every local of the function.
        """
        if self.flavour is not Flavour.PLAIN or mode not in (Mode.AT, Mode.ABOVE, Mode.AFTER):
            return None
        loop = _innermost_loop(fdef, path)
        if loop is None:
            return None
        self._flavoured = False
        self._segment = _Segment(len(path_of(loop)), version)
        try:
            rest = self._rest(fdef.body, path, mode, _Depth())
            return self._definition(fdef, rest, ("@ns",), self._load_present(fdef, present))
        finally:
            self._segment = None

    def _switched(self, node: ast.stmt) -> bool:
        """Whether code after or around `node` (a statement the segment resumes in) is left out."""
        return self._segment is not None and len(path_of(node)) <= self._segment.depth

    def _switch(self, node: ast.stmt, mode: Mode) -> list[ast.stmt]:
        """`@rt.switch(...)`: the hand-over to the continuation resuming at `node` in `mode`."""
        assert self._segment is not None
        path = ast.Tuple(elts=[ast.Constant(step) for step in path_of(node)], ctx=ast.Load())  # folded: a constant
        arguments = [ast.Constant(self._segment.version), path, ast.Constant(mode.value), self._cells()]
        return _at([ast.Expr(_call("switch", *arguments))], node)

    def anywhere(self, fdef: ast.FunctionDef) -> tuple[ast.FunctionDef, dict[tuple[Path, Mode], int]]:
        """One continuation that resumes at any statement, chosen when it is called: a function of
        the locals snapshot and `@to`, the number of a resume point; and the number of each point.

        Built with the version, so that the first crash at a site costs what a repeated one does
        (compiling a continuation per site is most of a first crash's cost). Every statement gets
        two numbers in the order of the source: `at` (before it), then its blocks' statements', then
        `after` (past it). Each block runs its statement `S` as `if @to <= at(S): S` (S comes after
        the resume point, or is it) `elif @to < after(S): <S entered where @to is>`; statements
        before the resume point fall through. A loop header resumed as `Mode.LOOP_NEXT` is the point
        after the last statement of its body (the iteration is over, the iterator goes on), and as
        `Mode.LOOP_EXHAUSTED` the first statement of its `else` (or the point after the loop). A
        resumed loop runs its remaining iterations in their plain form: the numbers are tested once
        per enclosing block, not in every iteration. `Mode.NEXT_ITERATION` and the trial and watched
        flavours are built per site (`continuation`).
        """
        points: dict[tuple[Path, Mode], int] = {}
        body = self._anywhere_block(fdef.body, _Depth(), points)
        return self._definition(fdef, body, ("@ns", "@to")), points

    def _anywhere_block(self, block: list[ast.stmt], depth: _Depth, points: dict[tuple[Path, Mode], int]
                        ) -> list[ast.stmt]:
        result: list[ast.stmt] = []
        for node in block:
            path = path_of(node)
            at = points[path, Mode.AT] = len(points)
            entered = self._anywhere_entered(node, depth, points) if isinstance(node, COMPOUND) else []
            after = points[path, Mode.AFTER] = len(points)
            if isinstance(node, ast.For):
                points[path, Mode.LOOP_NEXT] = points[path_of(node.body[-1]), Mode.AFTER]
            if isinstance(node, (ast.For, ast.While)):
                points[path, Mode.LOOP_EXHAUSTED] = points[path_of(node.orelse[0]), Mode.AT] if node.orelse else after
            branch = ast.If(test=_to_at_most(at), body=self.statement(node, depth), orelse=[])
            if entered:
                branch.orelse = [ast.If(test=_to_at_most(after - 1), body=entered, orelse=[])]
            result += _at([branch], node)
        return result

    def _anywhere_entered(self, node: ast.stmt, depth: _Depth, points: dict[tuple[Path, Mode], int]
                          ) -> list[ast.stmt]:
        """Compound statement `node` entered at the resume point inside it: each of its non-empty
        blocks, chosen by the range of numbers its statements have."""

        def inner(block: list[ast.stmt], inner_depth: _Depth) -> list[ast.stmt]:
            return self._anywhere_block(block, inner_depth, points)

        choices: list[tuple[int, list[ast.stmt]]] = []
        for field, block in child_blocks(node):
            if block:
                first = len(points)
                choices.append((first, self._resumed(node, field, inner, depth)))
        branches: list[ast.stmt] = choices[-1][1] or _at([ast.Pass()], node)
        for (_first, statements), (following, _next) in reversed(list(zip(choices, choices[1:]))):
            test = _to_at_most(following - 1)
            branches = _at([ast.If(test=test, body=statements or [ast.Pass()], orelse=branches)], node)
        return branches

    def _definition(self, fdef: ast.FunctionDef, rest: list[ast.stmt], parameters: tuple[str, ...],
                    prologue: list[ast.stmt] | None = None) -> ast.FunctionDef:
        """A continuation's `def`: `parameters`, after `@self` (the value zero-argument `super()` reads,
        which must be the first) when the function has a receiver; the prologue loading the locals
        (by default the one that loads whichever are present, `_load_locals`); `rest`."""
        names = (("@self",) if self.scope.receiver else ()) + parameters
        arguments = no_arguments()
        arguments.args = [ast.copy_location(ast.arg(arg=name), fdef) for name in names]
        prologue = self._load_locals(fdef) if prologue is None else prologue
        body = prologue + self._frame(rest, fdef, in_continuation=True)
        return self._copy(fdef, args=arguments, body=body, decorator_list=[], returns=None)

    def _load_locals(self, fdef: ast.FunctionDef) -> list[ast.stmt]:
        """The continuation's prologue, built once per version: its own cells declared `nonlocal`
        (they are the crashed frame's cells), then `if "x" in @ns: x = @ns["x"]` for each local,
        then `@ns.clear()`."""
        if self._prologue is None:
            prologue = self._declarations()
            at = located(fdef)  # one `if` per local: created in place, not walked by `_at` (half the build)
            namespace = ast.Name(id="@ns", ctx=ast.Load(), **at)  # shared: compiling never changes a tree
            for name in self.scope.plain_locals:
                present = ast.Compare(left=ast.Constant(name, **at), ops=[ast.In()], comparators=[namespace], **at)
                load = ast.Subscript(value=namespace, slice=ast.Constant(name, **at), ctx=ast.Load(), **at)
                assign = ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store(), **at)], value=load, **at)
                prologue.append(ast.If(test=present, body=[assign], orelse=[], **at))
            self._prologue = _at(prologue + [_clear_namespace()], fdef)
        return self._prologue

    def _declarations(self) -> list[ast.stmt]:
        """What a prologue starts with: the function's `global` / `nonlocal` statements, and its own
        cells declared `nonlocal` (they are the crashed frame's cells)."""
        declarations: list[ast.stmt] = list(self.scope.declared)
        if self.scope.own_cells:
            declarations.append(ast.Nonlocal(names=list(self.scope.own_cells)))
        return declarations

    def _load_present(self, fdef: ast.FunctionDef, present: tuple[str, ...]) -> list[ast.stmt]:
        """A prologue for a snapshot holding the locals `present` (in `Scope.plain_locals`): the cells
        declared as in `_load_locals`, then `a, b, ... = @rt.values(@ns, ("a", "b", ...))`, then
        `@ns.clear()`. A local the snapshot lacks stays unbound, as it was in the crashed frame."""
        prologue = self._declarations()
        if present:
            at = located(fdef)
            targets = ast.Tuple(elts=[ast.Name(id=name, ctx=ast.Store(), **at) for name in present],
                                ctx=ast.Store(), **at)
            # one tuple constant, as the compiler folds a tuple of constants
            names = ast.Constant(present, **at)  # type: ignore[arg-type]
            prologue.append(ast.Assign(targets=[targets], value=_call("values", _name("@ns"), names)))
        return _at(prologue + [_clear_namespace()], fdef)

    # -- resuming -------------------------------------------------------------------------

    def _rest(self, block: list[ast.stmt], path: Path, mode: Mode, depth: _Depth) -> list[ast.stmt]:
        index = path[0]
        if len(path) == 1:
            return self._tail(block, index, mode, depth)
        node, field = block[index], path[1]

        def inner(child: list[ast.stmt], child_depth: _Depth) -> list[ast.stmt]:
            return self._rest(child, path[2:], mode, child_depth)

        resumed = self._resumed(node, field, inner, depth)
        if self._switched(node):
            return resumed + self._switch(node, Mode.AFTER)
        return resumed + self.block(block[index + 1 :], depth)

    def _tail(self, block: list[ast.stmt], index: int, mode: Mode, depth: _Depth) -> list[ast.stmt]:
        after = self.block(block[index + 1 :], depth)
        if mode is Mode.AT:
            return self.block(block[index:], depth)
        if mode is Mode.ABOVE:
            return self._leaving(block[index], depth) + self.block(block[index:], depth)
        if mode is Mode.AFTER:
            return after
        node = block[index]
        if mode is Mode.NEXT_ITERATION:
            if not depth.in_loop:
                raise CannotResume("the faulty statement is in no loop of the function: no iteration to skip")
            return self._statement(_at([ast.Continue()], node)[0], depth)
        if mode is Mode.LOOP_NEXT and isinstance(node, ast.For):
            return self._marked(self._for(node, depth, _name(f"@it{depth.loops}")), node) + after
        if mode is Mode.LOOP_EXHAUSTED and isinstance(node, (ast.For, ast.While)):
            cleared = _at([_assign(f"@it{depth.loops}", _none())], node) if isinstance(node, ast.For) else []
            return self._marked(self.block(node.orelse, depth) + cleared, node) + after
        raise CannotResume(f"cannot resume {mode.value} a {type(node).__name__} statement")

    def _leaving(self, node: ast.stmt, depth: _Depth) -> list[ast.stmt]:
        """`@rt.leave(@cmK, @exK, ..., @cmD, @exD)`: exit, innermost first, the `with` statements at
        depth `D` (that of `node`'s block) and deeper that are open. A surgery whose run resumes
        above a crash inside them (`surgery.resume_path`) leaves them, as a `continue` would; the
        runtime sets the managers of those that are not open to `None` (`Vaccine._prepare`)."""
        deepest = sum(1 for name in self.scope.plain_locals if name.startswith("@cm"))
        managers = [_name(f"{prefix}{d}") for d in reversed(range(depth.withs, deepest)) for prefix in ("@cm", "@ex")]
        return _at([ast.Expr(_call("leave", *managers))], node)

    def _resumed(self, node: ast.stmt, field: str, inner: Resumed, depth: _Depth) -> list[ast.stmt]:
        """The remainder of compound statement `node`, entered in its block `field`, whose own
        remainder `inner` builds (given the block and the depth inside it)."""
        if isinstance(node, ast.If) or (isinstance(node, ast.Match) and field.startswith("cases.")):
            return inner(block_of(node, field), depth)
        if isinstance(node, (ast.For, ast.While)):
            if field == "orelse":
                cleared = _at([_assign(f"@it{depth.loops}", _none())], node) if isinstance(node, ast.For) else []
                return inner(node.orelse, depth) + cleared
            return self._resumed_loop(node, inner(node.body, depth.inside_loop(node)), depth)
        if isinstance(node, ast.With):
            within = replace(depth, withs=depth.withs + 1)
            body = self.catcher(inner(node.body, within), node, within) or _at([ast.Pass()], node)
            guard = _call("guard", _name(f"@cm{depth.withs}"), _name(f"@ex{depth.withs}"))
            reentered = ast.withitem(context_expr=guard, optional_vars=None)
            return _at([ast.With(items=[reentered], body=body)], node)
        if isinstance(node, TRY):
            if field == "finalbody":
                return self._resumed_final(node, inner(node.finalbody, depth), depth)
            within = self._try_depth(node, depth) if field == "body" else depth
            if field != "body" and node.finalbody:
                within = within.inside_final(node)
            return self._resumed_try(node, field, inner(block_of(node, field), within), depth)
        raise CannotResume(f"no block {field!r} in a {type(node).__name__} statement")

    def _resumed_loop(self, node: ast.For | ast.While, rest: list[ast.stmt], depth: _Depth) -> list[ast.stmt]:
        """Finish this iteration, then the remaining ones.

        `for @once in (None,): REST else: LOOP`: a `break` in REST skips the `else`, and so the
        remaining iterations and the loop's own `else`; a `continue` or falling off the end runs
        them. Exactly the meaning `break` and `continue` had in the interrupted iteration.
        """
        if self._switched(node):  # a `while` goes on by testing its condition again: resumed at its header
            remaining = self._switch(node, Mode.LOOP_NEXT if isinstance(node, ast.For) else Mode.AT)
        elif isinstance(node, ast.For):
            remaining = self._for(node, depth, _name(f"@it{depth.loops}"))
        else:
            remaining = [self._while(node, depth)]
        once = ast.For(target=_name("@once", store=True), iter=ast.Tuple(elts=[_none()], ctx=ast.Load()),
                       body=rest or [ast.Pass()], orelse=remaining)
        if self._flavoured and self.flavour is Flavour.TRIAL:
            once.orelse = self._signal("trial_end", node) + once.orelse
        return self._marked(_at([once], node), node)

    def _signal(self, helper: str, where: ast.AST) -> list[ast.stmt]:
        return _at([ast.Expr(_call(helper))], where)

    def _marked(self, statements: list[ast.stmt], where: ast.AST) -> list[ast.stmt]:
        """`statements` (the innermost resumed loop) with what the flavour adds, once: the trial's
        signal at the start of each remaining iteration and its end-of-loop signal after them, or
        the watch at the start of each remaining iteration."""
        if not self._flavoured:
            return statements
        self._flavoured = False
        if self.flavour is Flavour.TRIAL:
            marked = [self._each_iteration(statement, "trial_iteration") for statement in statements]
            return marked + self._signal("trial_loop_end", where)
        return [self._each_iteration(statement, "watch") for statement in statements]

    def _each_iteration(self, node: ast.stmt, helper: str) -> ast.stmt:
        """A loop whose every iteration starts with `@rt.<helper>()`; for the `for @once` of a resumed
        iteration, the loop of the remaining iterations in its `else`. Other statements unchanged."""
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and node.target.id == "@once":
            return self._copy(node, orelse=[self._each_iteration(s, helper) for s in node.orelse])
        if isinstance(node, (ast.For, ast.While)):
            return self._copy(node, body=self._signal(helper, node) + node.body)
        return node

    def _resumed_try(self, node: ast.Try, field: str, rest: list[ast.stmt], depth: _Depth) -> list[ast.stmt]:
        if field == "body":
            return self._try(node, depth, rest, fresh=False)
        inner = self.catcher(rest, node, depth)
        if field.startswith("handlers."):
            handler = node.handlers[int(field.split(".")[1])]
            if handler.name:
                unbind = ast.Delete(targets=[ast.Name(id=handler.name, ctx=ast.Del())])
                forget = [_assign(handler.name, _none()), unbind]
                inner = _at([ast.Try(body=inner or [ast.Pass()], handlers=[], orelse=[], finalbody=forget)], handler)
        if not node.finalbody:
            return inner
        k = final_number(node)
        final = self.block(node.finalbody, depth)
        pending = _at([ast.If(test=_is(f"@fp{k}"), body=[_assign(f"@fp{k}", _call("pending", _name(f"@fx{k}")))],
                              orelse=[])], node)
        return self._disarmable(inner or _at([ast.Pass()], node), pending + final, node)

    def _resumed_final(self, node: ast.Try, rest: list[ast.stmt], depth: _Depth) -> list[ast.stmt]:
        """The rest of a running `finally` clause, then what it was finishing: a pending exception
        is raised again, a pending `return` returns its value, a `break` or `continue` goes on."""
        k = f"@fp{final_number(node)}"
        kind = ast.Subscript(value=_name(k), slice=ast.Constant(0), ctx=ast.Load())
        value = ast.Subscript(value=_name(k), slice=ast.Constant(1), ctx=ast.Load())

        def when(word: str, then: ast.stmt) -> ast.stmt:
            test = ast.Compare(left=kind, ops=[ast.Eq()], comparators=[ast.Constant(word)])
            return ast.If(test=test, body=[then], orelse=[])

        finish = [when("raise", ast.Raise(exc=value)), when("return", ast.Return(value=value))]
        if depth.in_loop:
            finish += [when("break", ast.Break()), when("continue", ast.Continue())]
        return rest + _at([ast.If(test=_is(k, negate=True), body=finish, orelse=[])], node)
