"""What a surgery changes, when it changes little: one run of simple statements of one block.

Most surgeries replace a statement, or a few in a row, by others. When the statements replaced and
those replacing them are simple (no block, no nested scope, no `global`, `nonlocal`, `yield` or
`await`), and the new ones bind every local the old ones did, the new function has the old one's
scope: the same locals, cells and flags, plus the names the new statements bind that the old
function did not (when no code nested in it reads them, they are plain new locals). The names it
reads from its module are then the old function's, but for those the old run read and those that
became locals, plus what the new run reads. A surgery's version learns both from the old version
(`build_version(like=...)`) instead of compiling the whole new function before the run resumes;
the new statements are compiled with the code the run resumes in (`Vaccine._prepare` checks that
they are in it).

Which statements of a new version are the change's own (`statement_changes`) is read here too: the
allowlist judges them, and a trial counts each time they run (`daifu.core.repair_path`).
"""

from __future__ import annotations

import ast
import copy
import difflib
from collections.abc import Iterator
from dataclasses import dataclass

from daifu.core.blocks import COMPOUND, Path, block_of, child_blocks

_NOT_SIMPLE = (
    ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
    ast.GeneratorExp, ast.Global, ast.Nonlocal, ast.Yield, ast.YieldFrom, ast.Await, *COMPOUND,
    ast.AsyncFor, ast.AsyncWith,
)
"""What makes a statement's change reach the function's scope, flags or blocks."""

_ENDING = (ast.Raise, ast.Return, ast.Break, ast.Continue, ast.Assert)
"""Statements after which the compiler may drop the rest of their block as unreachable."""


@dataclass(frozen=True)
class Change:
    """Statements `old` of the old version, replaced by `new`, in the block at `block` (a path's
    prefix: alternating positions and field names, `()` for the body), from position `start`.
    `end`: the first line of the old source after the lines that differ; from there on, its lines
    are the new source's, moved by the difference in length."""

    block: Path
    start: int
    old: list[ast.stmt]
    new: list[ast.stmt]
    end: int

    def lines(self) -> tuple[int, int] | None:
        """The file lines the old statements span (first, last); `None` when there are none."""
        if not self.old:
            return None
        return self.old[0].lineno, self.old[-1].end_lineno or self.old[-1].lineno


def small_change(old_fdef: ast.FunctionDef, old_lines: list[str], new_fdef: ast.FunctionDef,
                 new_lines: list[str], first_lineno: int) -> Change | None:
    """The run of statements that differs between two versions of a function (their trees and
    source lines, both starting at file line `first_lineno`), when one run of one block holds the
    whole difference; `None` when the difference is elsewhere or wider (a header, a clause, the
    signature, statements of two blocks)."""
    low, old_high, new_high = changed_lines(old_lines, new_lines, first_lineno)
    old_run = statements_at(old_fdef, low, old_high)
    new_run = statements_at(new_fdef, low, new_high)
    if old_run is None or new_run is None:
        return None
    (old_block, old_start, old_statements), (new_block, new_start, new_statements) = old_run, new_run
    if old_statements and new_statements and (old_block, old_start) != (new_block, new_start):
        return None
    block, start = (old_block, old_start) if old_statements else (new_block, new_start)
    if not old_statements and not new_statements:
        return Change((), 0, [], [], old_high)  # only comments or blank lines differ
    if not (_holds(old_fdef, block, start, len(old_statements))
            and _holds(new_fdef, block, start, len(new_statements))):
        return None
    return Change(block, start, old_statements, new_statements, old_high)


def changed_lines(old_lines: list[str], new_lines: list[str], first_lineno: int) -> tuple[int, int, int]:
    """Where two sources starting at file line `first_lineno` differ: the first differing file
    line, and the end (exclusive) of the differing lines in the old and in the new source, after
    the longest common beginning and end."""
    prefix = 0
    shortest = min(len(old_lines), len(new_lines))
    while prefix < shortest and old_lines[prefix] == new_lines[prefix]:
        prefix += 1
    suffix = 0
    while suffix < shortest - prefix and old_lines[-1 - suffix] == new_lines[-1 - suffix]:
        suffix += 1
    low = first_lineno + prefix
    return low, first_lineno + len(old_lines) - suffix, first_lineno + len(new_lines) - suffix


def statements_at(fdef: ast.FunctionDef, low: int, high: int) -> tuple[Path, int, list[ast.stmt]] | None:
    """The statements overlapping file lines [low, high): their block's path, the position of the
    first, and the statements; `None` when the lines reach a compound statement's header or clause
    lines, or the lines before the body. An empty range has no statements (its block is the
    other version's)."""
    if high <= low:
        return (), 0, []
    block: list[ast.stmt] = fdef.body
    if not block or low < block[0].lineno:
        return None
    path: Path = ()
    while True:
        hits = [i for i, s in enumerate(block) if s.lineno < high and (s.end_lineno or s.lineno) >= low]
        if not hits:
            return path, sum(1 for s in block if s.lineno < low), []
        first, last = hits[0], hits[-1]
        node = block[first]
        if first != last or not isinstance(node, COMPOUND):
            return _alone(block, first, last, path)
        inside = [(name, child) for name, child in child_blocks(node)
                  if child and child[0].lineno <= low and high - 1 <= (child[-1].end_lineno or child[-1].lineno)]
        if len(inside) != 1:
            return None
        name, block = inside[0]
        path = path + (first, name)


def _alone(block: list[ast.stmt], first: int, last: int, path: Path) -> tuple[Path, int, list[ast.stmt]] | None:
    """Statements `first` to `last` of `block`, unless a statement outside them shares a line with them."""
    run = block[first : last + 1]
    if first > 0 and (block[first - 1].end_lineno or 0) >= run[0].lineno:
        return None
    if last + 1 < len(block) and block[last + 1].lineno <= (run[-1].end_lineno or run[-1].lineno):
        return None
    return path, first, run


def _holds(fdef: ast.FunctionDef, block: Path, start: int, count: int) -> bool:
    """Whether `fdef` has a block at `block` with statements `start` to `start + count`."""
    statements: list[ast.stmt] = fdef.body
    for position in range(0, len(block), 2):
        try:
            statements = block_of(statements[block[position]], block[position + 1])
        except (IndexError, KeyError):
            return False
    return start + count <= len(statements)


def derivable(change: Change, locals_: set[str]) -> frozenset[str] | None:
    """The names the new statements of `change` bind that are not in `locals_` (the old function's
    own locals, cells included), when a version with the change can be derived from the old one;
    else `None`. Derivable: its statements are simple, the new ones bind every name the old ones
    bound (so every old local stays one), and the old ones end nothing (no `raise`, `return`,
    `break`, `continue` or `assert`), so no statement the compiler dropped from the old code as
    unreachable comes back to life, with reads the old code does not show. Whether the names it
    returns can become new locals is the caller's to decide (`version._derived`)."""
    if any(isinstance(statement, _ENDING) for statement in change.old):
        return None
    old_bound: set[str] = set()
    new_bound: set[str] = set()
    for statements, bound in ((change.old, old_bound), (change.new, new_bound)):
        for statement in statements:
            for node in ast.walk(statement):
                if isinstance(node, _NOT_SIMPLE):
                    return None
                if isinstance(node, ast.Name):
                    if node.id in ("super", "__class__"):
                        return None  # zero-argument `super()` gives a method its `__class__` cell
                    if not isinstance(node.ctx, ast.Load):
                        bound.add(node.id)
                elif isinstance(node, (ast.Import, ast.ImportFrom)):
                    bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    if not old_bound <= new_bound or not all(name.isidentifier() for name in new_bound):
        return None  # `from m import *` binds no name a function may have
    return frozenset(new_bound - locals_)


def run_reads(change: Change, locals_: set[str]) -> tuple[tuple[str, int | None], ...]:
    """The names the new statements of a derivable `change` read from the module, with their lines:
    every name they load that is not one of the function's `locals_` (cells and closure variables
    included). Those of a statement the compiler drops as unreachable are among them: the reads of
    a derived version may hold more names than its code reads, never fewer."""
    return tuple(
        (node.id, node.lineno)
        for statement in change.new
        for node in ast.walk(statement)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in locals_
    )


# -- which statements of a new version changed ------------------------------------------------------

BODIES = ("body", "orelse", "finalbody")


def statement_changes(old: list[ast.stmt], new: list[ast.stmt]) -> Iterator[tuple[ast.stmt, bool]]:
    """Each new or changed statement of `new` over `old`, and each compound statement whose header changed over a counterpart (whole, flagged `True`) before the changes in its bodies: the
    statements a surgery's own code is made of (`daifu.decide.allowlist` judges them; a trial counts when
    they run, `daifu.core.repair_path`)."""
    matcher = difflib.SequenceMatcher(None, [ast.dump(s) for s in old], [ast.dump(s) for s in new], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        unmatched = list(old[i1:i2])
        for statement in new[j1:j2]:
            twin = next((o for o in unmatched if type(o) is type(statement) and is_compound(o)), None)
            if twin is None:
                yield statement, False
                continue
            unmatched.remove(twin)
            yield from _changed_compound(twin, statement)


def is_compound(node: ast.stmt) -> bool:
    """Whether `node` holds statements (a body or handlers)."""
    return any(isinstance(getattr(node, name, None), list) and getattr(node, name) for name in ("body", "handlers"))


def _changed_compound(old: ast.stmt, new: ast.stmt) -> Iterator[tuple[ast.stmt, bool]]:
    if ast.dump(header_only(old)) != ast.dump(header_only(new)):
        yield new, True
    for name in BODIES:
        yield from statement_changes(getattr(old, name, None) or [], getattr(new, name, None) or [])
    old_handlers, new_handlers = getattr(old, "handlers", []), getattr(new, "handlers", [])
    for index, handler in enumerate(new_handlers):
        before = old_handlers[index].body if index < len(old_handlers) else []
        yield from statement_changes(before, handler.body)


def header_only(node: ast.stmt) -> ast.stmt:
    """`node` with every body emptied to `pass`: what is left is its header (and its handlers' types)."""
    shallow = copy.copy(node)
    for name in BODIES:
        if getattr(shallow, name, None):
            setattr(shallow, name, [ast.Pass(lineno=node.lineno, col_offset=0)])
    if getattr(shallow, "handlers", None):
        shallow.handlers = [  # type: ignore[attr-defined]
            ast.ExceptHandler(type=h.type, name=h.name, body=[ast.Pass()], lineno=h.lineno, col_offset=0)
            for h in shallow.handlers  # type: ignore[attr-defined]
        ]
    return shallow
