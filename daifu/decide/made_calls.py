"""The calls the crashed statement made before it raised, which a repair may make again as they were made.

A repair often has to rewrite the very statement that crashed, keeping a call it made that the allowlist
would refuse in new code: `teacher.load_state_dict(torch.load(path, weights_only=True))` raised on the keys
of the state dict, and the fix renames the keys of what `torch.load(path, weights_only=True)` returned. The
call reads the file the program read, with the loader's arguments the program chose; made again, it reaches
nothing the program did not. A call is such a call when:

- it is the call the crashed statement raised in, or a call inside that call's arguments or receiver that
  Python evaluates whenever the call is made (not in a lambda, in a comprehension's element or conditions,
  in a branch of `x if c else y` or in a later operand of `and`/`or`): the raising instruction's place in
  the file (its line and columns, from the code's position table) names the raising call;
- its callee is a name or an attribute chain of names, and each argument a literal or a local name of the
  crashed frame holding an immutable value (a str, bytes, a number, a path): only a new binding of that name
  could change what the call reads, and the allowlist refuses a repair that binds it
  (`daifu.decide.allowlist_check.Checker`).

The calls are kept as their syntax trees without positions (`ast.dump`): a repair's call is the same call
when its tree is the same, keywords in the same order.
"""

from __future__ import annotations

import ast
import functools
import pathlib
import textwrap
from collections.abc import Iterator
from itertools import islice
from types import FrameType
from typing import Any

from daifu.core.crash import Crash
from daifu.core.locate import raising_instruction

_IMMUTABLE = (str, bytes, int, float, complex, bool, type(None), pathlib.PurePath)


def made_calls(crash: Crash) -> frozenset[str]:
    """The calls (`ast.dump` of each) the crashed statement made that a repair may make again (module docstring)."""
    frame = crash.frame
    if frame is None:
        return frozenset()
    span = _raising_span(crash.exception, frame)
    if span is None:
        return frozenset()
    return frozenset(text for text, call in _raising_calls(crash.source, crash.first_lineno, span)
                     if _plain(call, crash.locals))


@functools.lru_cache(maxsize=64)
def _raising_calls(source: str, first_lineno: int, span: tuple[int, int, int, int]) -> tuple[tuple[str, ast.Call], ...]:
    """The calls evaluated with the call of `source` at `span` (file line, end line, column, end column), each
    with its `ast.dump`: what the source alone says, kept per source and span (a repeat of a crash, or each
    candidate checked, parsed the function again otherwise)."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except (SyntaxError, ValueError, RecursionError):
        return ()
    margin = _margin(source)
    line, end_line, col, end_col = span
    first, last = line - first_lineno + 1, end_line - first_lineno + 1
    raising = next((node for node in ast.walk(tree) if isinstance(node, ast.Call)
                    and (node.lineno, node.end_lineno) == (first, last)
                    and (node.col_offset + margin, (node.end_col_offset or 0) + margin) == (col, end_col)), None)
    if raising is None:
        return ()
    return tuple((ast.dump(call), call) for call in _evaluated_calls(raising))


def _raising_span(error: BaseException, frame: FrameType) -> tuple[int, int, int, int] | None:
    """The file line, end line, column and end column of the instruction of `frame` that raised `error`."""
    found = raising_instruction(error, frame)
    if found is None or found[1] < 0:
        return None
    positions = next(islice(frame.f_code.co_positions(), found[1] // 2, None), None)
    if positions is None or any(p is None for p in positions):
        return None
    return positions  # type: ignore[return-value]


def _margin(source: str) -> int:
    """The indentation `textwrap.dedent` removes from `source`: the columns of its tree are that much less."""
    lines = [line for line in source.splitlines() if line.strip()]
    return min((len(line) - len(line.lstrip()) for line in lines), default=0)


def _evaluated_calls(call: ast.Call) -> Iterator[ast.Call]:
    """`call` and the calls Python evaluates whenever it is made: in its callee's receiver and its arguments,
    leaving out lambdas, comprehensions but for their first iterable, and parts that run on a condition."""
    pending: list[ast.AST] = [call]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Call):
            yield node
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            pending.append(node.generators[0].iter)
        elif isinstance(node, ast.IfExp):
            pending.append(node.test)
        elif isinstance(node, ast.BoolOp):
            pending.append(node.values[0])
        else:
            pending.extend(ast.iter_child_nodes(node))


def _plain(call: ast.Call, local_values: Any) -> bool:
    """Whether `call`'s callee is a chain of names and each argument a literal or a local holding an immutable value."""
    callee: ast.expr = call.func
    while isinstance(callee, ast.Attribute):
        callee = callee.value
    if not isinstance(callee, ast.Name):
        return False
    for argument in [*call.args, *(k.value for k in call.keywords)]:
        if isinstance(argument, ast.Constant):
            continue
        if not (isinstance(argument, ast.Name) and argument.id in local_values
                and isinstance(local_values[argument.id], _IMMUTABLE)):
            return False
    return not any(k.arg is None for k in call.keywords)
