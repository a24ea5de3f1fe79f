"""A verified repair offered again at a statement of the same shape, renamed to its names.

A repair the bot proposed, that passed its trial and was applied, is remembered in the workspace's
`repairs.jsonl` (this rank's). At the same site it is tried first (`daifu.decide.candidates.with_experience`).
The same bug is often written twice — the training step and the validation step, two scripts of one
project — with other names: `loss = crit(out, y)` in one function, `l2 = crit(o2, t2)` in another. So a
remembered repair is offered too at a crash of the same exception type whose faulty statement has the
same shape: the same syntax tree once names and constants are set aside (`shape`). The two statements'
trees, walked side by side, pair each name and constant of the old with one of the new
(`correspondence`): a pairing that is not one-to-one (`crit(out, out)` against `crit(a, b)`) offers
nothing. The repair's code is then renamed by that pairing (`renamed`):

- an action: its code, renamed;
- a surgery: the statements that replaced the faulty one (kept with the repair as `replaced_by`, when
  the surgery changed that statement and nothing else: `replacement`), renamed and put in place of the new
  faulty statement in the running function;
- a retry, a skip, a skip of the iteration: as they are.

A name the repair binds that the pairing does not rename must not be one the new function already uses
(the renamed code would overwrite it). The result is only a candidate: like every other it is checked,
judged by the allowlist and tried on a copy of the run before automatic mode applies it; a renaming that
does not repair the new crash fails its trial there.
"""

from __future__ import annotations

import ast
import copy
import os
import textwrap
from collections.abc import Iterable
from typing import Any

from daifu.core.crash import Crash
from daifu.core.decisions import Action, BadDecision, Decision, Retry, Skip, SkipIteration, Surgery
from daifu.core.kinds import from_row
from daifu.core.names import bound_names
from daifu.core.trial import Outcome
from daifu.store import credit

MAX_OFFERED = 2
"""Remembered repairs offered at one crash for a statement of the same shape (the most recent first)."""

Pairing = dict[Any, Any]
"""Names (`str`) and constants (`("const", type, value)`) of the remembered statement, each with its counterpart."""


def shape(statement: str) -> str | None:
    """The statement's syntax tree with every name and constant set aside; `None` unless it is one statement."""
    tree = _one(statement)
    if tree is None:
        return None
    blank = copy.deepcopy(tree)
    for node in ast.walk(blank):
        if isinstance(node, ast.Name):
            node.id = "_"
        elif isinstance(node, ast.arg):
            node.arg = "_"
        elif isinstance(node, ast.Constant):
            node.value = None
    return ast.dump(blank)


def correspondence(old: str, new: str) -> Pairing | None:
    """Each name and constant of statement `old` paired with the one at the same place in `new`, when the two
    have the same shape and the pairing is one-to-one; else `None`."""
    old_tree, new_tree = _one(old), _one(new)
    if old_tree is None or new_tree is None or shape(old) != shape(new):
        return None
    pairing: Pairing = {}
    for a, b in zip(_leaves(old_tree), _leaves(new_tree), strict=True):
        if pairing.setdefault(a, b) != b:
            return None
    if len(set(pairing.values())) != len(pairing):
        return None
    return pairing


def renamed(code: str, pairing: Pairing, taken: Iterable[str]) -> str | None:
    """`code` with each name and constant the pairing holds replaced by its counterpart; `None` when it does
    not parse, or binds a name the pairing leaves alone that is one of `taken` (the new function's names)."""
    try:
        tree = ast.parse(textwrap.dedent(code))
    except SyntaxError:
        return None
    own = bound_names(tree, nested=True) - {k for k in pairing if isinstance(k, str)}
    if own & (set(taken) | {v for v in pairing.values() if isinstance(v, str)}):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in pairing:
            node.id = pairing[node.id]
        elif isinstance(node, ast.Constant) and _constant(node) in pairing:
            node.value = pairing[_constant(node)][2]
    return ast.unparse(tree)


def replacement(crash: Crash, surgery: Surgery) -> str | None:
    """The statements `surgery` puts in place of the faulty statement, dedented, when it changes that statement
    and nothing else of the function; else `None`."""
    place = _place(crash)
    if place is None:
        return None
    index, span, indent = place
    old, new = crash.source.split("\n"), surgery.source.split("\n")
    tail = len(old) - index - span
    middle = new[index: len(new) - tail]
    if new[:index] != old[:index] or new[len(new) - tail:] != old[index + span:] or not middle:
        return None
    if any(line.strip() and not line.startswith(indent) for line in middle):
        return None
    return "\n".join(line[len(indent):] for line in middle)


def offered(crash: Crash, entries: list[dict[str, Any]]) -> list[tuple[Decision, str]]:
    """The remembered repairs of `entries` (most recent first) made for statements of the same shape as
    `crash`'s, at other sites, for the same exception type, each renamed for `crash`, with why it is offered."""
    found: list[tuple[Decision, str]] = []
    for entry in entries:
        decision = _retargeted(crash, entry)
        if decision is not None and all(decision != d for d, _ in found):
            where = f"{os.path.basename(str(entry.get('file')))}:{entry.get('line')}"
            found.append((decision, f"the repair verified at a statement of the same shape at {where} "
                                    f"(repair {entry.get('repair')}), renamed for this one"))
        if len(found) == MAX_OFFERED:
            break
    return found


def verified(entry: dict[str, Any]) -> bool:
    """Whether `entry` is a repair the bot suggested (applied automatically or by a person), its trial passed,
    and the run resumed after it."""
    play = entry.get("decision")
    passed = any(isinstance(t, dict) and t.get("decision") == play and t.get("verdict") in (
        Outcome.COMPLETED.value, Outcome.STOPPED_AT_EFFECT.value) for t in entry.get("trials") or [])
    return credit.read(entry)[1] == credit.BOT and passed and entry.get("duration_ms") is not None


def _retargeted(crash: Crash, entry: dict[str, Any]) -> Decision | None:
    """`entry`'s repair made for `crash`'s statement, when it may be (see the module docstring)."""
    site = (entry.get("function"), entry.get("file"), entry.get("line"))
    if site == crash.site or entry.get("exception_type") != crash.exception_type or not verified(entry):
        return None
    if entry.get("kind") != "statement" or crash.kind != "statement":
        return None
    pairing = correspondence(str(entry.get("statement") or ""), crash.statement)
    if pairing is None:
        return None
    try:
        decision = from_row(entry)
    except BadDecision:
        return None
    if isinstance(decision, (Retry, Skip, SkipIteration)):
        return decision
    taken = _names(crash.source)
    if isinstance(decision, Action):
        code = renamed(decision.code, pairing, taken)
        return Action(code) if code is not None else None
    if isinstance(decision, Surgery) and isinstance(entry.get("replaced_by"), str):
        code = renamed(entry["replaced_by"], pairing, taken)
        return _in_place(crash, code) if code is not None else None
    return None


def _in_place(crash: Crash, statements: str) -> Surgery | None:
    """The running function with `statements` in place of the faulty statement."""
    place = _place(crash)
    if place is None:
        return None
    index, span, indent = place
    lines = crash.source.split("\n")
    new = [indent + line if line.strip() else line for line in statements.split("\n")]
    return Surgery("\n".join(lines[:index] + new + lines[index + span:]))


def _place(crash: Crash) -> tuple[int, int, str] | None:
    """Where the faulty statement stands in the running source: its first line's index, its number of lines,
    its indentation; `None` when it shares its lines with another statement."""
    lines = crash.source.split("\n")
    index, span = crash.lineno - crash.first_lineno, len(crash.statement.split("\n"))
    if not 0 <= index < len(lines) or _one("\n".join(lines[index: index + span])) is None:
        return None
    return index, span, lines[index][: len(lines[index]) - len(lines[index].lstrip())]


def _one(statement: str) -> ast.stmt | None:
    """`statement` parsed, when it is one simple statement."""
    try:
        tree = ast.parse(textwrap.dedent(statement))
    except SyntaxError:
        return None
    if len(tree.body) != 1 or hasattr(tree.body[0], "body"):
        return None
    return tree.body[0]


def _leaves(tree: ast.AST) -> list[Any]:
    """The names and constants of `tree`, in the order `ast.walk` meets them."""
    found: list[Any] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.append(node.id)
        elif isinstance(node, ast.arg):
            found.append(node.arg)
        elif isinstance(node, ast.Constant):
            found.append(_constant(node))
    return found


def _constant(node: ast.Constant) -> tuple[str, str, Any]:
    return ("const", type(node.value).__name__, node.value)


def _names(source: str) -> set[str]:
    """Every name the function's source uses."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return set()
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {a.arg for a in ast.walk(tree)
                                                                          if isinstance(a, ast.arg)}
