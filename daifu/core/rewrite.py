"""The code transformation: the vaccinated fast path, and continuations that resume mid-function.

Generated names start with `@`, which no user can write (pytest's `@py_assert` habit). The state
the generated code keeps, beside the user's own locals:

- `@rt`      the function's `Vaccine` (a closure cell: nothing is added to the module globals);
- `@itD`     the iterator of the `for` loop at loop depth D, so a resume can continue that loop;
- `@cmD`     the `Guard` of the `with` at depth D, so a resume can exit it exactly once;
- `@pending` a `Handover` in flight, which disarms the user's `finally` clauses on its way out;
- `@e`, `@h`, `@k`, `@ns`, `@once` short-lived temporaries of the catchers and continuations.

Catchers (`try: ... except Exception`) sit only where an exception must be stopped before user
machinery sees it: the function body, every `with` body, and the blocks of a `try` with a
`finally`. Loop and `if` bodies need none: an exception leaves them without side effects, and the
loop's iterator survives in `@itD`. Since Python 3.11 a `try` costs nothing until it raises.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, replace
from enum import Enum

from daifu.core.blocks import COMPOUND, Path, block_of
from daifu.core.compiling import no_arguments
from daifu.core.compiling import place as _at


class Mode(Enum):
    """Where, relative to the statement at a path, a continuation starts."""

    AT = "at"  # run the statement (again)
    AFTER = "after"  # run what follows it
    LOOP_NEXT = "loop-next"  # a `for` header: ask the same iterator for its next item
    LOOP_EXHAUSTED = "loop-exhausted"  # a loop header: end the loop as if exhausted (run `else`)


class CannotResume(Exception):
    """The requested resume point cannot be reached (e.g. inside a running `finally`)."""


@dataclass(frozen=True)
class Scope:
    """What the generated code must know about the function's variables.

    cell_names: the cell and free variables, handed to the runtime on a crash so that a
        continuation shares them (closures keep seeing rebinds).
    plain_locals: the other local variables, loaded into a continuation from the snapshot.
    declared: `global` / `nonlocal` statements, repeated at the top of a continuation.
    has_finally: whether any `try` has a `finally` (then `@pending` exists).
    """

    cell_names: tuple[str, ...]
    plain_locals: tuple[str, ...]
    declared: tuple[ast.stmt, ...]
    has_finally: bool


@dataclass(frozen=True)
class _Depth:
    """Where generated code sits: loop and `with` nesting, and the user's handlers around it.

    `passed` are the exception types of the user's `except` clauses whose `try` body encloses
    this point: a catcher lets those through to them. `caught_all`: one of them is a bare
    `except`, `except Exception` or `except BaseException`, so nothing here is ever a crash.
    """

    loops: int = 0
    withs: int = 0
    passed: tuple[ast.expr, ...] = ()
    caught_all: bool = False

    def inside_try(self, node: ast.stmt) -> _Depth:
        handlers = getattr(node, "handlers", [])
        if not handlers:
            return self
        return replace(
            self,
            passed=self.passed + tuple(h.type for h in handlers if h.type is not None),
            caught_all=self.caught_all or any(_is_catch_all(h) for h in handlers),
        )


def _name(identifier: str, store: bool = False) -> ast.Name:
    return ast.Name(id=identifier, ctx=ast.Store() if store else ast.Load())


def _rt(attribute: str) -> ast.Attribute:
    return ast.Attribute(value=_name("@rt"), attr=attribute, ctx=ast.Load())


def _assign(identifier: str, value: ast.expr) -> ast.Assign:
    return ast.Assign(targets=[_name(identifier, store=True)], value=value)


def _none() -> ast.Constant:
    return ast.Constant(value=None)


def _is_catch_all(handler: ast.ExceptHandler) -> bool:
    return handler.type is None or (
        isinstance(handler.type, ast.Name) and handler.type.id in ("BaseException", "Exception")
    )


class Rewriter:
    """Builds vaccinated statement lists for one version of a function."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self._prologue: list[ast.stmt] | None = None
        self._statements: dict[tuple[int, _Depth], list[ast.stmt]] = {}

    # -- catchers -------------------------------------------------------------------------

    def _crash_call(self) -> ast.stmt:
        arguments: list[ast.expr] = [_name("@e")]
        if self.scope.cell_names:
            cells = ast.Tuple(elts=[_name(n) for n in self.scope.cell_names], ctx=ast.Load())
            arguments.append(ast.Lambda(args=no_arguments(), body=cells))
        return ast.Expr(ast.Call(func=_rt("crash"), args=arguments, keywords=[]))

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
            check = ast.Call(func=_rt("isinstance"), args=[_name("@e"), types], keywords=[])
            handler_body.append(ast.If(test=check, body=[ast.Raise()], orelse=[]))
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
            self._statements[key] = self._statement(node, depth)
        return self._statements[key]

    def _statement(self, node: ast.stmt, depth: _Depth) -> list[ast.stmt]:
        if isinstance(node, ast.For):
            return self._for(node, depth, self._fresh_iterator(node, depth))
        if isinstance(node, ast.While):
            return [self._copy(node, body=self.block(node.body, depth), orelse=self.block(node.orelse, depth))]
        if isinstance(node, ast.If):
            return [self._copy(node, body=self.block(node.body, depth), orelse=self.block(node.orelse, depth))]
        if isinstance(node, ast.With):
            return self._with(node, depth)
        if isinstance(node, ast.Match):
            cases = [self._copy(case, body=self.block(case.body, depth)) for case in node.cases]
            return [self._copy(node, cases=cases)]
        if isinstance(node, COMPOUND):  # try / try*
            return self._try(node, depth, body=self.block(node.body, depth.inside_try(node)))
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return _at([ast.Pass()], node)  # hoisted to the top of the function: see Scope.declared
        return [node]

    @staticmethod
    def _copy(node: ast.AST, **fields: object) -> ast.AST:
        fresh = copy.copy(node)
        for key, value in fields.items():
            setattr(fresh, key, value)
        return fresh

    def _fresh_iterator(self, node: ast.For, depth: _Depth) -> ast.expr:
        call = ast.Call(func=_rt("iter"), args=[node.iter], keywords=[])
        walrus = ast.NamedExpr(target=_name(f"@it{depth.loops}", store=True), value=call)
        return _at([walrus], node.iter)[0]  # type: ignore[return-value]

    def _for(self, node: ast.For, depth: _Depth, iterable: ast.expr) -> list[ast.stmt]:
        inner = replace(depth, loops=depth.loops + 1)
        _at([iterable], node.iter)
        loop = self._copy(node, iter=iterable, body=self.block(node.body, inner), orelse=self.block(node.orelse, depth))
        variable = f"@it{depth.loops}"
        reset = _at([_assign(variable, _none())], node)  # a stale iterator must never be resumed
        fresh = isinstance(iterable, ast.NamedExpr)
        return (reset if fresh else []) + [loop] + _at([_assign(variable, _none())], node)

    def _with(self, node: ast.With, depth: _Depth) -> list[ast.stmt]:
        item = node.items[0]
        guarded = ast.Call(func=_rt("guard"), args=[item.context_expr], keywords=[])
        walrus = ast.NamedExpr(target=_name(f"@cm{depth.withs}", store=True), value=guarded)
        _at([walrus], item.context_expr)
        inner = replace(depth, withs=depth.withs + 1)
        body = self.catcher(self.block(node.body, inner), node, inner)
        guarded_item = ast.withitem(context_expr=walrus, optional_vars=item.optional_vars)
        return [self._copy(node, items=[guarded_item], body=body)]

    def _try(self, node: ast.stmt, depth: _Depth, body: list[ast.stmt]) -> list[ast.stmt]:
        """A `try`, with the user's own handlers first in line and its `finally` disarmable."""
        is_star = not isinstance(node, ast.Try)
        body = body or _at([ast.Pass()], node)
        handlers = [self._copy(h, body=self._handler_body(h, node, depth)) for h in node.handlers]
        orelse = self.block(node.orelse, depth)
        if node.finalbody:
            orelse = self.catcher(orelse, node, depth)
        if node.finalbody and not is_star:
            body = self.catcher(body, node, depth.inside_try(node))
        if handlers and not is_star:
            let_through = ast.ExceptHandler(type=_rt("Handover"), name=None, body=[ast.Raise()])
            handlers = _at([let_through], node) + handlers  # type: ignore[assignment]
        if not node.finalbody:
            return [self._copy(node, body=body, handlers=handlers, orelse=orelse)]
        inner = [self._copy(node, body=body, handlers=handlers, orelse=orelse, finalbody=[])] if handlers else body
        return self._disarmable(inner, self.block(node.finalbody, depth), node)

    def _handler_body(self, handler: ast.ExceptHandler, node: ast.stmt, depth: _Depth) -> list[ast.stmt]:
        return self.catcher(self.block(handler.body, depth), handler, depth)

    def _disarmable(self, inner: list[ast.stmt], final: list[ast.stmt], where: ast.AST) -> list[ast.stmt]:
        """`try: inner finally: final`, where a `Handover` passing through skips `final`.

        The continuation that takes over runs its own copy of the `finally`, at the right time.
        """
        store = ast.ExceptHandler(type=_rt("Handover"), name="@h", body=[_assign("@pending", _name("@h"))])
        pending_is_none = ast.Compare(left=_name("@pending"), ops=[ast.Is()], comparators=[_none()])
        guarded_final = ast.If(test=pending_is_none, body=final or [ast.Pass()], orelse=[])
        outer = ast.Try(body=inner, handlers=[store], orelse=[], finalbody=[guarded_final])
        relay = ast.If(
            test=ast.Compare(left=_name("@pending"), ops=[ast.IsNot()], comparators=[_none()]),
            body=[ast.Raise(exc=_name("@pending"))],
            orelse=[],
        )
        _at([store, relay], where)
        _at([outer, guarded_final], where)
        return [outer, relay]

    # -- whole functions ------------------------------------------------------------------

    def _frame(self, body: list[ast.stmt], where: ast.AST, in_continuation: bool) -> list[ast.stmt]:
        """The function-level catcher, and the hand-over to a continuation."""
        caught = self.catcher(body, where, _Depth()) or _at([ast.Pass()], where)
        if in_continuation:
            handover_body: list[ast.stmt] = [ast.Return(value=_name("@h"))]
            after: list[ast.stmt] = []
        else:
            released = [_assign(name, _none()) for name in self.scope.plain_locals]
            handover_body = [_assign("@k", _name("@h")), *released]
            after = [ast.Return(value=ast.Call(func=_rt("resume"), args=[_name("@k")], keywords=[]))]
        handover = ast.ExceptHandler(type=_rt("Handover"), name="@h", body=handover_body)
        top = ast.Try(body=caught, handlers=[handover], orelse=[ast.Return(value=_none())], finalbody=[])
        prelude = [_assign("@pending", _none())] if self.scope.has_finally else []
        return _at(prelude + [top] + after, where)

    def fast_path(self, fdef: ast.FunctionDef) -> ast.FunctionDef:
        """The vaccinated function: the user's code, plus catchers that cost nothing until a crash."""
        declared = list(self.scope.declared)
        body = declared + self._frame(self.block(fdef.body, _Depth()), fdef, in_continuation=False)
        return self._copy(fdef, body=body, decorator_list=[])  # type: ignore[return-value]

    def continuation(self, fdef: ast.FunctionDef, path: Path, mode: Mode) -> ast.FunctionDef:
        """A function of one argument, the locals snapshot, that runs `fdef` from `path` on.

        It finishes the invocation: the rest of the block that crashed, then the rest of every
        enclosing block, resumed loops running their remaining iterations with the saved
        iterators and resumed `with` blocks exiting through their saved guards.
        """
        rest = self._rest(fdef.body, path, mode, _Depth())
        body = self._load_locals(fdef) + self._frame(rest, fdef, in_continuation=True)
        arguments = no_arguments()
        arguments.args = [ast.copy_location(ast.arg(arg="@ns"), fdef)]
        return self._copy(fdef, args=arguments, body=body, decorator_list=[], returns=None)  # type: ignore[return-value]

    def _load_locals(self, fdef: ast.FunctionDef) -> list[ast.stmt]:
        """`if "x" in @ns: x = @ns["x"]` for each local, then `@ns.clear()`; built once per version."""
        if self._prologue is None:
            prologue: list[ast.stmt] = list(self.scope.declared)
            for name in self.scope.plain_locals:
                present = ast.Compare(left=ast.Constant(name), ops=[ast.In()], comparators=[_name("@ns")])
                load = ast.Subscript(value=_name("@ns"), slice=ast.Constant(name), ctx=ast.Load())
                prologue.append(ast.If(test=present, body=[_assign(name, load)], orelse=[]))
            clear = ast.Attribute(value=_name("@ns"), attr="clear", ctx=ast.Load())
            prologue.append(ast.Expr(ast.Call(func=clear, args=[], keywords=[])))
            self._prologue = _at(prologue, fdef)
        return self._prologue

    # -- resuming -------------------------------------------------------------------------

    def _rest(self, block: list[ast.stmt], path: Path, mode: Mode, depth: _Depth) -> list[ast.stmt]:
        index = path[0]
        if len(path) == 1:
            return self._tail(block, index, mode, depth)
        node, field = block[index], path[1]
        return self._resumed(node, field, path[2:], mode, depth) + self.block(block[index + 1 :], depth)

    def _tail(self, block: list[ast.stmt], index: int, mode: Mode, depth: _Depth) -> list[ast.stmt]:
        after = self.block(block[index + 1 :], depth)
        if mode is Mode.AT:
            return self.block(block[index:], depth)
        if mode is Mode.AFTER:
            return after
        node = block[index]
        if mode is Mode.LOOP_NEXT and isinstance(node, ast.For):
            return self._for(node, depth, _name(f"@it{depth.loops}")) + after
        if mode is Mode.LOOP_EXHAUSTED and isinstance(node, (ast.For, ast.While)):
            cleared = _at([_assign(f"@it{depth.loops}", _none())], node) if isinstance(node, ast.For) else []
            return self.block(node.orelse, depth) + cleared + after
        raise CannotResume(f"cannot resume {mode.value} a {type(node).__name__} statement")

    def _resumed(self, node: ast.stmt, field: str, path: Path, mode: Mode, depth: _Depth) -> list[ast.stmt]:
        """The remainder of compound statement `node`, entered in its block `field`."""
        if isinstance(node, ast.If) or (isinstance(node, ast.Match) and field.startswith("cases.")):
            return self._rest(block_of(node, field), path, mode, depth)
        if isinstance(node, (ast.For, ast.While)):
            if field == "orelse":
                cleared = _at([_assign(f"@it{depth.loops}", _none())], node) if isinstance(node, ast.For) else []
                return self._rest(node.orelse, path, mode, depth) + cleared
            inner = replace(depth, loops=depth.loops + 1) if isinstance(node, ast.For) else depth
            return self._resumed_loop(node, self._rest(node.body, path, mode, inner), depth)
        if isinstance(node, ast.With):
            inner = replace(depth, withs=depth.withs + 1)
            body = self.catcher(self._rest(node.body, path, mode, inner), node, inner) or _at([ast.Pass()], node)
            reentered = ast.withitem(context_expr=_name(f"@cm{depth.withs}"), optional_vars=None)
            return _at([ast.With(items=[reentered], body=body)], node)
        if isinstance(node, COMPOUND):
            inner = depth.inside_try(node) if field == "body" else depth
            return self._resumed_try(node, field, self._rest(block_of(node, field), path, mode, inner), depth)
        raise CannotResume(f"no block {field!r} in a {type(node).__name__} statement")

    def _resumed_loop(self, node: ast.For | ast.While, rest: list[ast.stmt], depth: _Depth) -> list[ast.stmt]:
        """Finish this iteration, then the remaining ones.

        `for @once in (None,): REST else: LOOP`: a `break` in REST skips the `else`, and so the
        remaining iterations and the loop's own `else`; a `continue` or falling off the end runs
        them. Exactly the meaning `break` and `continue` had in the interrupted iteration.
        """
        if isinstance(node, ast.For):
            remaining = self._for(node, depth, _name(f"@it{depth.loops}"))
        else:
            remaining = [self._copy(node, body=self.block(node.body, depth), orelse=self.block(node.orelse, depth))]
        once = ast.For(
            target=_name("@once", store=True),
            iter=ast.Tuple(elts=[_none()], ctx=ast.Load()),
            body=rest or [ast.Pass()],
            orelse=remaining,
        )
        return _at([once], node)

    def _resumed_try(self, node: ast.stmt, field: str, rest: list[ast.stmt], depth: _Depth) -> list[ast.stmt]:
        if field == "finalbody":
            raise CannotResume("cannot resume inside a `finally` clause: what it was finishing is unknown")
        if field == "body":
            return self._try(node, depth, body=rest)
        inner = self.catcher(rest, node, depth)
        if field.startswith("handlers."):
            handler = node.handlers[int(field.split(".")[1])]
            if handler.name:
                unbind = ast.Delete(targets=[ast.Name(id=handler.name, ctx=ast.Del())])
                forget = [_assign(handler.name, _none()), unbind]
                inner = _at([ast.Try(body=inner or [ast.Pass()], handlers=[], orelse=[], finalbody=forget)], handler)
        if not node.finalbody:
            return inner
        return self._disarmable(inner or _at([ast.Pass()], node), self.block(node.finalbody, depth), node)
