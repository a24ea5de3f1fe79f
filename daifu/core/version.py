"""`Version`: one source text of a vaccinated function, parsed, analysed and compiled."""

from __future__ import annotations

import ast
import copy
import inspect
import re
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import CodeType
from typing import TYPE_CHECKING

from daifu.core.blocks import TRY, Path, annotate, child_blocks, shared_lines
from daifu.core.changes import Change, derivable, run_reads, small_change
from daifu.core.compiling import RUNTIME, compile_definition, place, qualified
from daifu.core.reads import ModuleNames, module_names
from daifu.core.rewrite import Flavour, Mode, Rewriter, Scope, number_finals, unseen
from daifu.core.seedscope import SeedNames, body_definition, declared_body, seed_names
from daifu.core.source import normalize, parse_function
from daifu.core.splice import shared_after, splice

if TYPE_CHECKING:
    from daifu.core.account import Probe


@dataclass
class Version:
    """A source of the function and everything derived from it.

    `fdef` is the normalized, path-annotated tree: the reference for locating crashes and for
    mapping a surgery; generated code shares its nodes but never changes them.
    `seed_names`: under the prototype's scope model (`daifu.core.seedscope`), the names this version
    shares with the module; its code is then the body's: no parameters, those names `global`.
    """

    number: int
    source: str
    first_lineno: int
    fdef: ast.FunctionDef
    scope: Scope
    plain: CodeType | None
    """The function compiled as written (`plain_code`); `None` until asked for, in a version
    derived from an older one (`build_version(like=...)`)."""
    filename: str
    flags: int
    free_names: tuple[str, ...]
    nesting: int
    """How deeply its loops, `with` and `try` statements nest (see `deferrable`)."""
    runtime: object = None
    seed_names: SeedNames | None = None
    shared_lines: frozenset[int] = frozenset()
    """The lines where only a column tells which statement raised (`blocks.shared_lines`)."""
    anywhere: CodeType | None = None
    """The continuation that resumes at any statement (`Rewriter.anywhere`), once compiled."""
    points: dict[tuple[Path, Mode], int] = field(default_factory=dict)
    """The number of each resume point in `anywhere`."""
    continuations: dict[tuple[Path, Mode, Flavour], CodeType] = field(default_factory=dict)
    """Its continuations for one site, each compiled once (`Vaccine._continuation`); a refused
    surgery's version takes its own with it."""
    segments: dict[tuple[Path, Mode, tuple[str, ...]], CodeType | None] = field(default_factory=dict)
    """Its segments (`Rewriter.segment`), by resume point and the locals present (`Vaccine._segment`)."""
    change: Change | None = None
    """How it differs from the version it was derived from, `derived_from` (`build_version(like=...)`)."""
    derived_from: Version | None = field(default=None, repr=False, compare=False)
    """The older version it was derived from. When its tree shares that version's nodes (but for the
    statements spliced in, `daifu.core.splice`), its rewriter starts with the forms that version's
    built (`Rewriter`)."""
    derived_names: ModuleNames | None = None
    """What it does with its module's names, when derived from an older version (`module_names`)."""
    probes: dict[int, Probe] = field(default_factory=dict)
    """A surgery's statements counted each time they run (`daifu.core.account.find_probes`), by the
    `id` of the statement: set before any of its code is generated, which then calls them."""

    @property
    def plain_code(self) -> CodeType:
        """The function compiled as written: its scope's source, and the check that it compiles
        (`SyntaxError` if not). A derived version compiles it when first asked for."""
        if self.plain is None:
            self.plain = compile_definition(self.fdef, self.filename, self.flags, self.free_names)
        return self.plain

    @cached_property
    def module_names(self) -> ModuleNames:
        """What its code does with its module's names (`daifu.core.reads`): read from its compiled
        code, or for a derived version from the older one's (`_derived`), so that a surgery
        of a surgery compiles nothing more either."""
        return self.derived_names if self.derived_names is not None else module_names(self.plain_code)

    def module_reads(self) -> set[str]:
        """The names it reads from its module and never assigns there."""
        return self.module_names.read()

    def holds_change(self, path: Path) -> bool:
        """Whether code resuming at `path` holds every statement the change it was derived with
        added (the code then compiles them before the run resumes): they are in the block resumed,
        at or after the resume point. True for a version compiled as written."""
        change = self.change
        if self.plain is not None or change is None or not change.new:
            return True
        return change.block == path[:-1] and change.start >= path[-1]

    @cached_property
    def rewriter(self) -> Rewriter:
        """The rewriter of the fast path and the plain continuations: the statements' forms it
        builds are what all of them are made of, so each is built once per version (`Rewriter.statement`)."""
        older = self.derived_from
        return Rewriter(self.scope, forms_of=older.rewriter if older is not None else None, probes=self.probes)

    @cached_property
    def fast_code(self) -> CodeType:
        """The vaccinated code, compiled when first asked for (`build_version` asks, but for a
        surgery's version: its run resumes in a continuation, and the function needs this code
        only from its next call on, see `Vaccine._install`)."""
        fast = self.rewriter.fast_path(self._definition())
        return compile_definition(fast, self.filename, self.flags, self.free_names, self.runtime)

    @property
    def deferrable(self) -> bool:
        """Whether code generated from this version surely compiles once its source has: then a
        surgery's run may resume before its fast path and the rest of its call are compiled (a
        segment, `Rewriter.segment`; a stub, `Vaccine._install`). Each level of nesting takes up to
        three of the compiler's twenty nested blocks in generated code; with four levels, every
        combination of loops, `with` and `try` compiles (five can fail). A deeper version is
        compiled whole before its run resumes, so that what cannot compile is refused instead."""
        return self.nesting <= 4

    @property
    def compiled(self) -> bool:
        """Whether `fast_code` is compiled yet (`cached_property` keeps it in the instance)."""
        return "fast_code" in vars(self)

    def stub_code(self) -> CodeType:
        """Code with the function's signature and closure that compiles `fast_code` and runs the call
        with it: `return @rt.compiled()(a, *args, k=k, **kw)` (`Vaccine.compiled`).

        Its closure variables are named in a branch that never runs, so that it can replace the
        function's code in place; it runs on the `def` line, as a resumed frame's code does, and leaves
        itself out of the traceback of an exception that leaves the call (`rewrite.unseen`).
        """
        fdef = self._definition()
        arguments = fdef.args
        positional: list[ast.expr] = [_load(a.arg) for a in arguments.posonlyargs + arguments.args]
        if arguments.vararg:
            positional.append(ast.Starred(value=_load(arguments.vararg.arg), ctx=ast.Load()))
        keywords = [ast.keyword(arg=a.arg, value=_load(a.arg)) for a in arguments.kwonlyargs]
        if arguments.kwarg:
            keywords.append(ast.keyword(arg=None, value=_load(arguments.kwarg.arg)))
        runtime = ast.Call(func=ast.Attribute(value=ast.Constant(RUNTIME), attr="compiled", ctx=ast.Load()),
                           args=[], keywords=[])
        body = unseen([ast.Return(value=ast.Call(func=runtime, args=positional, keywords=keywords))])
        if self.free_names:
            named = ast.Tuple(elts=[_load(name) for name in self.free_names], ctx=ast.Load())
            body.append(ast.If(test=ast.Constant(False), body=[ast.Expr(named)], orelse=[]))
        spot = ast.Pass(lineno=fdef.lineno, col_offset=fdef.col_offset, end_lineno=fdef.lineno,
                        end_col_offset=fdef.col_offset + 3)
        stub = copy.copy(fdef)
        stub.body = place(body, spot)
        return compile_definition(stub, self.filename, self.flags, self.free_names, self.runtime)

    def _definition(self) -> ast.FunctionDef:
        """What the vaccinated code is compiled from: the function, or under the prototype's scope
        model its body (`daifu.core.seedscope`)."""
        return body_definition(self.fdef) if self.seed_names is not None else self.fdef

    @cached_property
    def trial_rewriter(self) -> Rewriter:
        """The rewriter of this version's trial continuations (see `daifu.core.trial`)."""
        return Rewriter(self.scope, Flavour.TRIAL, probes=self.probes)

    @cached_property
    def watched_rewriter(self) -> Rewriter:
        """The rewriter of continuations whose next iterations are watched (`daifu.decide.watch`)."""
        return Rewriter(self.scope, Flavour.WATCHED, probes=self.probes)

    def compile_continuation(self, tree: ast.FunctionDef, qualname: str) -> CodeType:
        """A continuation's code (`Rewriter.continuation`, `Rewriter.anywhere`): sharing the function's
        cells, reaching the runtime through `@rt`, named as the function in tracebacks."""
        code = compile_definition(tree, self.filename, self.flags, self.scope.cell_names, self.runtime)
        return qualified(code, qualname)

    def compile_anywhere(self, qualname: str) -> None:
        """Compile the continuation that resumes anywhere, so that no first crash compiles one. Code
        the compiler refuses (nested beyond its limits) leaves none: crashes then resume per site."""
        tree, points = self.rewriter.anywhere(self.fdef)
        try:
            self.anywhere = self.compile_continuation(tree, qualname)
        except (SyntaxError, RecursionError):
            return
        self.points = points

    @cached_property
    def lines(self) -> list[str]:
        """The source's lines as Python numbers them (`source_lines`)."""
        return source_lines(self.source)

    def line_text(self, lineno: int) -> str:
        """The text of file line `lineno`, as this version's source has it."""
        index = lineno - self.first_lineno
        return self.lines[index] if 0 <= index < len(self.lines) else ""

    def statement_text(self, node: ast.stmt, header_only: bool) -> str:
        """The source of a statement; of a compound statement's header line only when asked."""
        last = node.lineno if header_only else (node.end_lineno or node.lineno)
        lines = [self.line_text(number) for number in range(node.lineno, last + 1)]
        indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
        return "\n".join(line[indent:] for line in lines).rstrip()


def source_lines(source: str) -> list[str]:
    """`source`'s lines as Python numbers them: split at line ends only (`str.splitlines` also
    splits at form feeds and other separators, which would shift every later line). A source
    without a carriage return is split by `str.split`, ten times as fast as the expression."""
    return source.split("\n") if "\r" not in source else re.split(r"\r\n|\r|\n", source)


def _load(name: str) -> ast.Name:
    return ast.Name(id=name, ctx=ast.Load())


def _walk_function(fdef: ast.FunctionDef) -> list[ast.stmt]:
    found: list[ast.stmt] = []

    def walk(block: list[ast.stmt]) -> None:
        for statement in block:
            found.append(statement)
            for _field, child in child_blocks(statement):
                walk(child)

    walk(fdef.body)
    return found


_BLOCKS = (ast.For, ast.While, ast.With, *TRY)
"""The statements that nest the compiler's blocks (an `if` or a `match` nests none)."""


def _depths(block: list[ast.stmt]) -> tuple[int, int, int]:
    """The deepest nesting in `block` of `for` loops, of `with` statements, and of `_BLOCKS`."""
    loops = withs = blocks = 0
    todo: list[tuple[list[ast.stmt], int, int, int]] = [(block, 0, 0, 0)]
    while todo:
        statements, outer_loops, outer_withs, outer_blocks = todo.pop()
        for statement in statements:
            kind = type(statement)
            inner_loops = outer_loops + (kind is ast.For)
            inner_withs = outer_withs + (kind is ast.With)
            inner_blocks = outer_blocks + (kind in _BLOCKS)
            loops, withs, blocks = max(loops, inner_loops), max(withs, inner_withs), max(blocks, inner_blocks)
            for _field, child in child_blocks(statement):
                todo.append((child, inner_loops, inner_withs, inner_blocks))
    return loops, withs, blocks


def _receiver(fdef: ast.FunctionDef, cells: set[str], seed: bool) -> str | None:
    """The parameter zero-argument `super()` reads (the first positional one), when the function can
    call it (it has a `__class__` cell)."""
    positional = fdef.args.posonlyargs + fdef.args.args
    if seed or "__class__" not in cells or not positional:
        return None
    return positional[0].arg


def build_version(
    number: int,
    source: str,
    first_lineno: int,
    filename: str,
    flags: int,
    free_names: tuple[str, ...],
    runtime: object = None,
    seed: bool = False,
    fast: bool = True,
    like: Version | None = None,
) -> Version:
    """Parse, check and compile one source of the function; raises SyntaxError/ValueError if bad.
    `fast=False` leaves the vaccinated code (`Version.fast_code`) to be compiled when first asked for.

    `free_names` are the original function's free variables: the fast path has exactly those, so
    it can replace the original's code in place. `runtime` is what its `@rt` stands for. `seed`:
    compile the body of a function under the prototype's scope model (`daifu.core.seedscope`).
    `like`: an older version of the function (same first line) this source may be a small change
    of: when the change keeps its scope (`daifu.core.changes`), the new version takes its scope and
    module reads from it, and compiles as written only when asked (`Version.plain_code`).
    """
    lines = source_lines(source)
    if seed:
        like = None  # under the prototype's scope model the body is compiled: nothing is derived
    spliced = splice(like.fdef, like.lines, lines, first_lineno) if like is not None else None
    statements: list[ast.stmt] | None = None  # a spliced tree's blocks are the old ones: nothing to walk
    change: Change | None
    if spliced is not None:
        fdef, change = spliced
    else:
        fdef = normalize(parse_function(source, first_lineno))
        if isinstance(fdef, ast.AsyncFunctionDef):
            raise ValueError("the source defines an async function")
        statements, finals = _stamped(fdef)
        change = small_change(like.fdef, like.lines, fdef, lines, first_lineno) if like is not None else None
    if like is not None and change is not None:
        shift = len(lines) - len(like.lines)
        derived = _derived(like, change, shift)
        if derived is not None:  # only simple statements changed: the old nesting, the shared lines moved
            scope, reads = derived
            if statements is not None:  # parsed anew: its own `global` / `nonlocal` statements
                scope = replace(scope, declared=_declarations(statements))
            version = Version(number, source, first_lineno, fdef, scope, None, filename, flags, free_names,
                              like.nesting, runtime, None, shared_after(like.shared_lines, change, shift),
                              change=change, derived_from=like, derived_names=reads)
            return _finished(version, fast)
    if statements is None:  # spliced, but not derived: compiled whole
        statements, finals = _stamped(fdef)
    loops, withs, nesting = _depths(fdef.body)
    compiled, names = fdef, None
    seed_declared: tuple[ast.stmt, ...] = ()
    if seed:
        names = seed_names(fdef, free_names)
        compiled, seed_declared = declared_body(fdef, names)
    plain_code = compile_definition(compiled, filename, flags, free_names)
    if plain_code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        raise ValueError("the source defines a generator (it uses `yield` or `await`)")
    cells = set(plain_code.co_cellvars) | set(free_names)
    internal = (
        ("@call",)
        + tuple(f"@it{d}" for d in range(loops))
        + tuple(name for d in range(withs) for name in (f"@cm{d}", f"@ex{d}"))
        + tuple(name for k in range(finals) for name in (f"@fx{k}", f"@fp{k}"))
    )
    scope = Scope(
        cell_names=tuple(sorted(cells)),
        own_cells=tuple(sorted(set(plain_code.co_cellvars) - {"__class__"})),
        plain_locals=tuple(n for n in plain_code.co_varnames if n not in cells) + internal,
        declared=seed_declared + _declarations(statements),
        finals=finals,
        receiver=_receiver(fdef, cells, seed),
    )
    version = Version(number, source, first_lineno, fdef, scope, plain_code, filename, flags, free_names,
                      nesting, runtime, names, shared_lines(fdef))
    return _finished(version, fast)


def _stamped(fdef: ast.FunctionDef) -> tuple[list[ast.stmt], int]:
    """Stamp the function's statements with their paths and its `try ... finally` statements with
    their numbers; its statements, and how many of those there are."""
    annotate(fdef)
    statements = _walk_function(fdef)
    return statements, number_finals(statements)


def _finished(version: Version, fast: bool) -> Version:
    if fast:
        version.fast_code  # noqa: B018 - compiled now: its errors are the caller's to see
    return version


def _declarations(statements: list[ast.stmt]) -> tuple[ast.stmt, ...]:
    return tuple(s for s in statements if isinstance(s, (ast.Global, ast.Nonlocal)))


def _derived(like: Version, change: Change, shift: int) -> tuple[Scope, ModuleNames] | None:
    """The scope of a new source of the function and what it does with its module's names, taken
    from the older version `like` when the `change` between them allows (`daifu.core.changes`);
    else `None`. `shift`: how many lines the new source has more than the old one.

    The scope is `like`'s, plus the names the new statements bind that it did not have as locals:
    each becomes a plain local, unless code nested in the function reads it (it would become a
    closure variable there), the function declares it `global` or `nonlocal`, or it is a closure
    variable already. The reads are `like`'s, but for those on the lines of the statements replaced
    (those after the lines that differ moved by `shift`) and those of the new locals, plus the new
    statements' own: what the new function's bytecode would show, without compiling it (and the
    names of new statements the compiler would drop as unreachable, `changes.run_reads`).
    """
    scope = like.scope
    own = {name for name in scope.plain_locals if not name.startswith("@")} | set(scope.own_cells)
    new_locals = derivable(change, own)
    if new_locals is None:
        return None
    old = like.module_names
    if new_locals:
        declared = {name for statement in scope.declared for name in statement.names}  # type: ignore[attr-defined]
        if new_locals & (set(scope.cell_names) | declared | old.nested):
            return None
        user = tuple(name for name in scope.plain_locals if not name.startswith("@"))
        generated = scope.plain_locals[len(user):]
        scope = replace(scope, plain_locals=user + tuple(sorted(new_locals)) + generated)
    first, last = change.lines() or (change.end, change.end - 1)  # no statement replaced: no line dropped
    kept = tuple((name, line if line is None or line < change.end else line + shift)
                 for name, line in old.reads
                 if (line is None or not first <= line <= last) and name not in new_locals)
    reads = run_reads(change, own | new_locals | set(scope.cell_names))
    return scope, ModuleNames(kept + reads, old.stored, old.nested)
