"""A seeded generator of small structured functions, for differential tests of the runtime.

Each generated function mixes nested `for`/`while` loops, `if`/`else`, `with`, `try` whose
handlers catch the function's own raises (`except ValueError as errN`, reading `errN` first and
last, so a resume inside the handler needs it; with `else` and `finally`), `break`/`continue`/`return`
(also inside `try` bodies, so a `finally` clause runs with a pending `return`, `break` or
`continue`), arithmetic on locals, and appends to a trace list. Nested scopes read the locals
while they are rebound: lambdas and inner functions kept and called later, list comprehensions
and generator expressions. Some functions are decorated (a `functools.wraps` wrapper, a context
decorator). Every `trace.append` carries a number — those in `finally` clauses too — so a fault
can be injected at one of them.
"""

from __future__ import annotations

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


HEADER = "from tests.programgen import counted, noted, tracked\n\n"
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
            return (
                ["try:"]
                + nested(in_loop)
                + [f"    if a % 5 == {n % 5}:", f"        raise ValueError({n})"]
                + [f"except ValueError as err{n}:", f"    trace.append(('caught', {n}, err{n}.args))"]
                + nested(in_loop)
                + [f"    trace.append(('handled', {n}, err{n}.args))"]  # read after a resume in the handler
                + ["else:", f"    trace.append(('else', {n}))"]
                + ["finally:"]
                + ["    " + line for line in self._append()]
                + (["    " + line for line in self._append()] if self.rng.random() < 0.3 else [])
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
