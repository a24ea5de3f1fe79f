"""A seeded generator of small structured functions, for differential tests of the runtime.

Each generated function mixes nested `for`/`while` loops, `if`/`else`, `with`, `try` whose
handlers catch the function's own raises (`except ValueError as errN`, reading `errN` first and
last, so a resume inside the handler needs it; with `else`, and in three of four with `finally`),
`break`/`continue`/`return` (also inside `try` bodies, so a `finally` clause runs with a pending
`return`, `break` or `continue`), arithmetic on locals, and appends to a trace list. Nested
scopes read the locals while they are rebound: lambdas and inner functions kept and called later,
list comprehensions and generator expressions. Some functions are decorated (a `functools.wraps`
wrapper, a context decorator). Every `trace.append` carries a number — those in `finally`
clauses too — so a fault can be injected at one of them.

`Above` makes, from a function with a fault, the surgery that fixes its cause a few lines up and
the plain program that does what the run repaired that way must do.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class InjectedFault(Exception):
    """Raised once at the injected statement; no generated handler catches it."""


class Injector:
    """`fault(n, value)` raises once when `n` is the target; `skip(n)` is true once for it."""

    def __init__(self, target: int | None) -> None:
        self.target, self.fired = target, False

    def fault(self, number: int, value: Any) -> Any:
        if number == self.target and not self.fired:
            self.fired = True
            raise InjectedFault(number)
        return value

    def skip(self, number: int) -> bool:
        if number == self.target and not self.fired:
            self.fired = True
            return True
        return False


class ArmedInjector(Injector):
    """An injector whose fault fires only once `arm` has run (a statement above the target: the
    cause of the fault, which a surgery of that statement removes)."""

    def __init__(self, target: int | None) -> None:
        super().__init__(target)
        self.armed = False

    def arm(self, value: Any) -> Any:
        self.armed = True
        return value

    def fault(self, number: int, value: Any) -> Any:
        return super().fault(number, value) if self.armed else value


@contextmanager
def tracked(trace: list[Any], number: int) -> Iterator[None]:
    trace.append(("enter", number))
    try:
        yield
    finally:
        trace.append(("exit", number))


CALLS: list[str] = []
"""What the generated decorators saw, in order (they must run exactly as often with DaiFu)."""


def counted(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A `functools.wraps` wrapper that doubles `a` on the way in and notes each call."""

    @functools.wraps(fn)
    def wrapper(a: int, b: int, inject: Any) -> Any:
        CALLS.append(f"counted {fn.__name__}")
        return fn(a * 2, b, inject)

    return wrapper


class noted(contextlib.ContextDecorator):
    """A context decorator (as `torch.no_grad()` is): each call runs inside its `with`."""

    def __enter__(self) -> noted:
        CALLS.append("noted enter")
        return self

    def __exit__(self, *exc: Any) -> bool:
        CALLS.append("noted exit")
        return False


HEADER = "from tests.programgen import InjectedFault, counted, noted, tracked\n\n"
"""What a module holding generated functions imports."""


class ProgramGenerator:
    """Writes the source of one function; `appends` lists the trace statements' numbers."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.counter = 0
        self.appends: list[int] = []
        self.decorators = self.rng.choice([[], [], ["counted"], ["noted()"], ["counted", "noted()"]])

    def _next(self) -> int:
        self.counter += 1
        return self.counter

    def source(self, style: str = "plain", target: int | None = None) -> str:
        """`style`: "plain", "fault" (raise at `target`) or "skip" (leave `target` out once)."""
        self.counter, self.appends, self.style, self.target = 0, [], style, target
        self.rng_state = self.rng.getstate()
        body = self._append() + self._block(depth=0, in_loop=False)
        self.rng.setstate(self.rng_state)
        lines = [f"@{decorator}" for decorator in self.decorators]
        lines += ["def generated(a, b, inject):", "    trace = []", "    kept = []"]
        lines += ["    " + line for line in body]
        lines.append("    return trace, a, b, [f() for f in kept]")
        return "\n".join(lines) + "\n"

    def _append(self) -> list[str]:
        number = self._next()
        self.appends.append(number)
        value = f"('s', {number}, a, b)"
        if self.style == "fault" and number == self.target:
            return [f"trace.append(inject.fault({number}, {value}))"]
        if self.style == "skip" and number == self.target:
            return [f"if not inject.skip({number}):", f"    trace.append({value})"]
        return [f"trace.append({value})"]

    def _block(self, depth: int, in_loop: bool) -> list[str]:
        lines: list[str] = []
        for _ in range(self.rng.randint(1, 3)):
            lines += self._statement(depth, in_loop)
        return lines

    def _statement(self, depth: int, in_loop: bool) -> list[str]:
        choices = ["assign", "append", "append", "closure"]
        if depth < 3:
            choices += ["if", "for", "while", "with", "try"]
        if in_loop:
            choices += ["break", "continue"]
        choices.append("return")
        kind = self.rng.choice(choices)
        n = self._next()
        nested = lambda loop: ["    " + line for line in self._block(depth + 1, loop)]  # noqa: E731
        if kind == "assign":
            return [f"a = (a * 3 + b + {n}) % 17", "b = (b + a) % 13"]
        if kind == "append":
            return self._append()
        if kind == "closure":
            return self._closure(n)
        if kind == "if":
            return [f"if (a + {n}) % 3 == 0:"] + nested(in_loop) + ["else:"] + nested(in_loop)
        if kind == "for":
            return [f"for i{n} in range({self.rng.randint(0, 3)}):"] + nested(True) + self._maybe_else(depth, in_loop)
        if kind == "while":
            header = [f"w{n} = 0", f"while w{n} < {self.rng.randint(0, 3)}:", f"    w{n} += 1"]
            return header + nested(True) + self._maybe_else(depth, in_loop)
        if kind == "with":
            return [f"with tracked(trace, {n}):"] + nested(in_loop)
        if kind == "try":
            clauses = (
                ["try:"]
                + nested(in_loop)
                + [f"    if a % 5 == {n % 5}:", f"        raise ValueError({n})"]
                + [f"except ValueError as err{n}:", f"    trace.append(('caught', {n}, err{n}.args))"]
                + nested(in_loop)
                + [f"    trace.append(('handled', {n}, err{n}.args))"]  # read after a resume in the handler
                + ["else:", f"    trace.append(('else', {n}))"]
            )
            second = self.rng.random() < 0.3
            if n % 4 == 0:  # one `try` in four has no `finally` (decided without a draw: the other programs stay)
                return clauses
            return (
                clauses
                + ["finally:"]
                + ["    " + line for line in self._append()]
                + (["    " + line for line in self._append()] if second else [])
            )
        if kind == "break":
            return [f"if b % 4 == {n % 4}:", "    break"]
        if kind == "continue":
            return [f"if b % 3 == {n % 3}:", "    continue"]
        return [f"if a == {n % 17}:", "    return ('returned', trace, a, b, [f() for f in kept])"]

    def _closure(self, n: int) -> list[str]:
        """A nested scope reading `a` and `b`: kept for later, or evaluated now."""
        form = self.rng.choice(["lambda", "def", "listcomp", "genexp"])
        if form == "lambda":
            return [f"kept.append(lambda: ({n}, a, b))"]
        if form == "def":
            return [f"def inner{n}():", f"    return ({n}, a + b)", f"kept.append(inner{n})"]
        if form == "listcomp":
            return [f"trace.append(('l', {n}, [a + k for k in range(2)]))"]
        return [f"trace.append(('g', {n}, sum(b * k for k in range(3))))"]

    def _maybe_else(self, depth: int, in_loop: bool) -> list[str]:
        if self.rng.random() < 0.5:
            return []
        return ["else:"] + ["    " + line for line in self._block(depth + 1, in_loop)]


class Above:
    """A fault whose cause is a statement above it, and its fix, for a function with a fault at
    trace statement `target` (`ProgramGenerator.source("fault", target)`, run with an
    `ArmedInjector`).

    The cause is a new statement, `trace.append(inject.arm(('fix', T, a, b)))`, put before a
    statement at one level of the target's path, chosen with `rng`, among those a run interrupted
    at the target goes back to when that statement changes: its own block and the blocks around
    it up to the innermost loop's body or the function's body, through `if`, `with` and `try`
    statements without `finally` (found here on the syntax tree, not by DaiFu). The fix drops the
    `inject.arm`. `expected` is the plain program that runs what a repair resuming at the fix must
    run: the statements from the cause to the one holding the fault, in a `try` whose
    `except InjectedFault` runs them again in their fixed form, on the values the fault found —
    as a jump back to the changed statement would (a `with` left that way exits).

    `level`: how many blocks above the target's the cause sits.
    """

    def __init__(self, faulty: str, target: int, rng: random.Random) -> None:
        lines = faulty.split("\n")
        function = ast.parse(faulty).body[0]
        assert isinstance(function, ast.FunctionDef)
        chain = _chain(function.body, f"inject.fault({target},")
        choices = [(depth, place) for depth, (block, index) in enumerate(chain) for place in range(index + 1)
                   if depth >= _iteration(chain) and (depth or place >= 2)]  # after `trace = []; kept = []`
        depth, place = rng.choice(choices)
        block, index = chain[depth]
        self.level = len(chain) - 1 - depth
        before, holder = block[place], block[index]
        indent = " " * before.col_offset
        cause = f"{indent}trace.append(inject.arm(('fix', {target}, a, b)))"
        fix = f"{indent}trace.append(('fix', {target}, a, b))"
        first, last = before.lineno - 1, (holder.end_lineno or holder.lineno)  # 0-based, exclusive end
        self.faulty = "\n".join(lines[:first] + [cause] + lines[first:])
        self.fixed = "\n".join(lines[:first] + [fix] + lines[first:])
        region = lines[first:last]
        shifted = ["    " + line for line in region]
        wrapped = ([f"{indent}try:", "    " + cause] + shifted + [f"{indent}except InjectedFault:", "    " + fix]
                   + shifted)
        self.expected = "\n".join(lines[:first] + wrapped + lines[last:])
        self.cause, self.fix = cause.strip(), fix.strip()


def _chain(block: list[ast.stmt], marker: str) -> list[tuple[list[ast.stmt], int]]:
    """The blocks from the function's body down to the statement whose source holds `marker` (a
    call only the target makes), each with the position of the statement on the way."""
    for index, statement in enumerate(block):
        if not isinstance(statement, (ast.For, ast.While, ast.If, ast.With, ast.Try)):
            if marker in ast.unparse(statement):
                return [(block, index)]
            continue
        for child in _blocks(statement):
            found = _chain(child, marker)
            if found:
                return [(block, index), *found]
    return []


def _blocks(statement: ast.stmt) -> list[list[ast.stmt]]:
    if isinstance(statement, ast.Try):
        return [statement.body, *[handler.body for handler in statement.handlers], statement.orelse,
                statement.finalbody]
    return [statement.body, getattr(statement, "orelse", [])]


def _iteration(chain: list[tuple[list[ast.stmt], int]]) -> int:
    """The first block of `chain` a run interrupted at its last statement may go back to: the
    body of the innermost loop on the way, or past a `try ... finally`, or the function's body."""
    first = 0
    for depth, (block, index) in enumerate(chain[:-1]):
        holder = block[index]
        if isinstance(holder, (ast.For, ast.While)) or (isinstance(holder, ast.Try) and holder.finalbody):
            first = depth + 1
    return first
