"""`Version`: one source text of a vaccinated function, parsed, analysed and compiled."""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass, field
from functools import cached_property
from types import CodeType

from daifu.core.blocks import Path, annotate, child_blocks, shared_lines
from daifu.core.compiling import compile_definition, qualified
from daifu.core.rewrite import Flavour, Mode, Rewriter, Scope, number_finals
from daifu.core.seedscope import SeedNames, body_definition, declared_body, seed_names
from daifu.core.source import normalize, parse_function


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
    fast_code: CodeType
    plain_code: CodeType
    runtime: object = None
    seed_names: SeedNames | None = None
    shared_lines: frozenset[int] = frozenset()
    """The lines where only a column tells which statement raised (`blocks.shared_lines`)."""
    anywhere: CodeType | None = None
    """The continuation that resumes at any statement (`Rewriter.anywhere`), once compiled."""
    points: dict[tuple[Path, Mode], int] = field(default_factory=dict)
    """The number of each resume point in `anywhere`."""
    rewriter: Rewriter = field(init=False, repr=False)
    """The rewriter that built the fast path: its statements' forms are what every continuation
    (and `anywhere`) is made of, so they are built once per version (`Rewriter.statement`)."""

    @cached_property
    def trial_rewriter(self) -> Rewriter:
        """The rewriter of this version's trial continuations (see `daifu.core.trial`)."""
        return Rewriter(self.scope, Flavour.TRIAL)

    @cached_property
    def watched_rewriter(self) -> Rewriter:
        """The rewriter of continuations whose next iterations are watched (`daifu.decide.watch`)."""
        return Rewriter(self.scope, Flavour.WATCHED)

    def compile_continuation(self, tree: ast.FunctionDef, flags: int, qualname: str) -> CodeType:
        """A continuation's code (`Rewriter.continuation`, `Rewriter.anywhere`): sharing the function's
        cells, reaching the runtime through `@rt`, named as the function in tracebacks."""
        code = compile_definition(tree, self.fast_code.co_filename, flags, self.scope.cell_names, self.runtime)
        return qualified(code, qualname)

    def compile_anywhere(self, flags: int, qualname: str) -> None:
        """Compile the continuation that resumes anywhere, so that no first crash compiles one. Code
        the compiler refuses (nested beyond its limits) leaves none: crashes then resume per site."""
        tree, points = self.rewriter.anywhere(self.fdef)
        try:
            self.anywhere = self.compile_continuation(tree, flags, qualname)
        except (SyntaxError, RecursionError):
            return
        self.points = points

    @cached_property
    def lines(self) -> list[str]:
        """The source's lines as Python numbers them: split at line ends only (`str.splitlines` also
        splits at form feeds and other separators, which would shift every later line)."""
        return re.split(r"\r\n|\r|\n", self.source)

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


def _walk_function(fdef: ast.FunctionDef) -> list[ast.stmt]:
    found: list[ast.stmt] = []

    def walk(block: list[ast.stmt]) -> None:
        for statement in block:
            found.append(statement)
            for _field, child in child_blocks(statement):
                walk(child)

    walk(fdef.body)
    return found


def _depths(block: list[ast.stmt], loops: int = 0, withs: int = 0) -> tuple[int, int]:
    deepest = (loops, withs)
    for statement in block:
        inner_loops = loops + isinstance(statement, ast.For)
        inner_withs = withs + isinstance(statement, ast.With)
        for _field, child in child_blocks(statement):
            found = _depths(child, inner_loops, inner_withs)
            deepest = (max(deepest[0], found[0]), max(deepest[1], found[1]))
        deepest = (max(deepest[0], inner_loops), max(deepest[1], inner_withs))
    return deepest


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
) -> Version:
    """Parse, check and compile one source of the function; raises SyntaxError/ValueError if bad.

    `free_names` are the original function's free variables: the fast path has exactly those, so
    it can replace the original's code in place. `runtime` is what its `@rt` stands for. `seed`:
    compile the body of a function under the prototype's scope model (`daifu.core.seedscope`).
    """
    fdef = normalize(parse_function(source, first_lineno))
    if isinstance(fdef, ast.AsyncFunctionDef):
        raise ValueError("the source defines an async function")
    annotate(fdef)
    compiled, names = fdef, None
    seed_declared: tuple[ast.stmt, ...] = ()
    if seed:
        names = seed_names(fdef, free_names)
        compiled, seed_declared = declared_body(fdef, names)
    plain_code = compile_definition(compiled, filename, flags, free_names)
    if plain_code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        raise ValueError("the source defines a generator (it uses `yield` or `await`)")
    statements = _walk_function(fdef)
    declared = seed_declared + tuple(s for s in statements if isinstance(s, (ast.Global, ast.Nonlocal)))
    cells = set(plain_code.co_cellvars) | set(free_names)
    finals = number_finals(statements)
    loops, withs = _depths(fdef.body)
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
        declared=declared,
        finals=finals,
        receiver=_receiver(fdef, cells, seed),
    )
    rewriter = Rewriter(scope)
    fast = rewriter.fast_path(body_definition(fdef) if seed else fdef)
    fast_code = compile_definition(fast, filename, flags, free_names, runtime)
    version = Version(number, source, first_lineno, fdef, scope, fast_code, plain_code, runtime, names, shared_lines(fdef))
    version.rewriter = rewriter
    return version
