"""A seeded generator of small structured functions, for differential tests of the runtime.

Each generated function mixes nested `for`/`while` loops, `if`/`else`, `with`, `try` whose
handlers catch the function's own raises, `break`/`continue`/`return`, arithmetic on locals and
appends to a trace list. Every `trace.append` carries a number, so a fault can be injected at
one of them.
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from typing import Any
from collections.abc import Iterator


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


class ProgramGenerator:
    """Writes the source of one function; `appends` lists the trace statements' numbers."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.counter = 0
        self.appends: list[int] = []

    def _next(self) -> int:
        self.counter += 1
        return self.counter

    def source(self, style: str = "plain", target: int | None = None) -> str:
        """`style`: "plain", "fault" (raise at `target`) or "skip" (leave `target` out once)."""
        self.counter, self.appends, self.style, self.target = 0, [], style, target
        self.rng_state = self.rng.getstate()
        body = self._append() + self._block(depth=0, in_loop=False)
        self.rng.setstate(self.rng_state)
        lines = ["def generated(a, b, inject):", "    trace = []"]
        lines += ["    " + line for line in body]
        lines.append("    return trace, a, b")
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
        for _ in range(self.rng.randint(1, 4)):
            lines += self._statement(depth, in_loop)
        return lines

    def _statement(self, depth: int, in_loop: bool) -> list[str]:
        choices = ["assign", "append", "append"]
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
                + ["except ValueError as err:", f"    trace.append(('caught', {n}, err.args))"]
                + nested(in_loop)
                + ["else:", f"    trace.append(('else', {n}))"]
                + ["finally:", f"    trace.append(('finally', {n}))"]
            )
        if kind == "break":
            return [f"if b % 4 == {n % 4}:", "    break"]
        if kind == "continue":
            return [f"if b % 3 == {n % 3}:", "    continue"]
        return [f"if a == {n % 17}:", "    return ('returned', trace, a, b)"]

    def _maybe_else(self, depth: int, in_loop: bool) -> list[str]:
        if self.rng.random() < 0.5:
            return []
        return ["else:"] + ["    " + line for line in self._block(depth + 1, in_loop)]
