"""Parsing code from a report: one thread at a time, and every way the parser can refuse.

CPython 3.11 keeps the AST constructor's recursion depth per interpreter, not per thread, so two
threads parsing at once can fail with `SystemError: AST constructor recursion depth mismatch`
(python/cpython#106905); the service analyses on several threads, hence the lock. A parse holds
the GIL throughout anyway, so the lock costs no parallelism.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()

TOO_DEEP = (RecursionError, MemoryError)
"""What `ast.parse` raises for code nested beyond its limits: `MemoryError` is the parser's
"stack overflow" (100k unary minus), `RecursionError` comes while building the tree."""
REFUSED = (SyntaxError, ValueError) + TOO_DEEP
"""Everything `ast.parse` raises for text that is no parsable code (`ValueError`: a null byte, before 3.12)."""


def parse(text: str) -> ast.Module:
    """`ast.parse(text)`, never concurrently with another parse of this module; raises one of `REFUSED`."""
    with _LOCK:
        return ast.parse(text)
