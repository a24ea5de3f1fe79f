"""Validating a surgery and finding where, in the new source, the interrupted run resumes."""

from __future__ import annotations

import ast
import copy
import difflib

from daifu.core.blocks import HEADER_KINDS, Path, block_of, child_blocks
from daifu.core.version import Version


class SurgeryRefused(Exception):
    """A surgery that cannot be applied; the message says exactly why. Nothing was changed."""


def check_same_signature(old: ast.FunctionDef, new: ast.FunctionDef) -> None:
    """Refuse a new source that renames the function or changes its parameters."""
    if new.name != old.name:
        raise SurgeryRefused(f"the new source renames the function from {old.name!r} to {new.name!r}")
    if _parameters(old.args) != _parameters(new.args):
        raise SurgeryRefused(
            f"the new source changes the parameters of {old.name!r} "
            f"from ({_signature(old.args)}) to ({_signature(new.args)})"
        )
    old_defaults = [ast.dump(d) for d in old.args.defaults + [d for d in old.args.kw_defaults if d]]
    new_defaults = [ast.dump(d) for d in new.args.defaults + [d for d in new.args.kw_defaults if d]]
    if old_defaults != new_defaults:
        raise SurgeryRefused(
            f"the new source changes default values of {old.name!r}; they were evaluated when the "
            "function was defined and cannot change in a running program"
        )


def _parameters(args: ast.arguments) -> tuple[object, ...]:
    return (
        [a.arg for a in args.posonlyargs],
        [a.arg for a in args.args],
        args.vararg.arg if args.vararg else None,
        [a.arg for a in args.kwonlyargs],
        args.kwarg.arg if args.kwarg else None,
    )


def _signature(args: ast.arguments) -> str:
    return ast.unparse(ast.arguments(**{**args.__dict__, "defaults": [], "kw_defaults": [None] * len(args.kwonlyargs)}))


def _header_key(node: ast.stmt) -> str:
    """A statement's kind and header, without the statements of its blocks."""
    shallow = copy.copy(node)
    for field, _block in child_blocks(node):
        if field.startswith(("handlers.", "cases.")):
            continue
        setattr(shallow, field, [])
    if isinstance(node, ast.Match):
        shallow.cases = [ast.match_case(pattern=c.pattern, guard=c.guard, body=[]) for c in node.cases]
    if hasattr(node, "handlers"):
        shallow.handlers = [ast.ExceptHandler(type=h.type, name=h.name, body=[]) for h in node.handlers]
    return ast.dump(shallow)


def _map_index(old_keys: list[str], new_keys: list[str], index: int) -> int | None:
    matcher = difflib.SequenceMatcher(None, old_keys, new_keys, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if i1 <= index < i2 and (tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1)):
            return j1 + index - i1
    return None


def resume_path(old: Version, new: Version, path: Path) -> tuple[Path, bool]:
    """The path in `new` where a run interrupted at `path` of `old` resumes.

    Enclosing compound statements are matched by kind and header; the one holding the crash must
    still be there. In the block that crashed, execution resumes at the first statement the
    surgery changed, when that is at or before the faulty one (the bug was a line up), else at the
    faulty statement's counterpart. Returns the path and whether it is the faulty statement's own
    counterpart (False: a changed statement, to be run from its start).
    """
    old_block: list[ast.stmt] = old.fdef.body
    new_block: list[ast.stmt] = new.fdef.body
    new_path: list[object] = []
    for level in range(0, len(path) - 1, 2):
        index, field = path[level], path[level + 1]
        old_node = old_block[index]
        mapped = _map_index([_header_key(s) for s in old_block], [_header_key(s) for s in new_block], index)
        new_node = new_block[mapped] if mapped is not None else None
        if new_node is None or type(new_node) is not type(old_node) or not _same_target(old_node, new_node):
            kind = HEADER_KINDS.get(type(old_node), type(old_node).__name__.lower())
            raise SurgeryRefused(
                f"the new source changes the enclosing `{kind}` statement at line {old_node.lineno}, "
                "inside which the program is running; change only the block that crashed"
            )
        try:
            old_block, new_block = block_of(old_node, field), block_of(new_node, field)
        except (KeyError, IndexError):
            raise SurgeryRefused(
                f"the new source removes the block of line {old_node.lineno} that is running"
            ) from None
        new_path += [mapped, field]
    index = path[-1]
    old_dumps = [ast.dump(s) for s in old_block]
    new_dumps = [ast.dump(s) for s in new_block]
    matcher = difflib.SequenceMatcher(None, old_dumps, new_dumps, autojunk=False)
    for tag, i1, i2, j1, _j2 in matcher.get_opcodes():
        if tag != "equal" and i1 <= index:
            return tuple(new_path + [j1]), False
        if tag == "equal" and i1 <= index < i2:
            return tuple(new_path + [j1 + index - i1]), True
    return tuple(new_path + [len(new_block)]), False


def _same_target(old: ast.stmt, new: ast.stmt) -> bool:
    if isinstance(old, ast.For):
        return ast.dump(old.target) == ast.dump(new.target)  # type: ignore[attr-defined]
    return True
