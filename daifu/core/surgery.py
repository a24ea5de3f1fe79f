"""The one validation of a surgery, and where in the new source the interrupted run resumes.

The rule (used by the runtime, the console and the repair bot's client alike):

A surgery is the whole new `def` of the vaccinated function. It is accepted when it parses,
defines one plain function (not a generator or coroutine: no `yield`, no `await`) with the same
name, parameters and default values, compiles, every name it newly reads from outside is defined
(assigned in the new function, a parameter, a closure variable, a module global or a builtin: a
name the crashed version already read from outside, on a branch the run did not take, is Python's
business, as it was before the surgery: a `NameError` if that branch runs), and the run can
resume in it: each compound statement the program is running inside (the enclosing loops,
`with`, `try`, `if`, `match`) is still there with the same header — its body may change — and the
block that crashed may be wrapped in a new `try` (the run resumes inside it). The run resumes at
the new statement that corresponds to the faulty one, or at the first changed statement before
it in the interrupted iteration (the fix is a line or two up), whatever the nesting of the faulty
statement: in its block, or before the statement holding it in a block around it, up to the body
of the innermost loop or the function's body, through `if`, `match`, `with` (exited on the way,
`Mode.ABOVE`) and `try` statements without `finally` (`blocks.iteration_start`). The statements
from there to the faulty one run again.

`outside_block` tells whether a surgery also changes code outside the innermost block holding the
faulty statement; the repair bot's client asks a person's approval for that.
"""

from __future__ import annotations

import ast
import builtins
import copy
import difflib
from collections.abc import Callable, Collection, Hashable
from dataclasses import dataclass, field
from typing import Any

from daifu.core.blocks import COMPOUND, HEADER_KINDS, TRY, Path, block_of, child_blocks, iteration_start, node_at
from daifu.core.changes import Change
from daifu.core.rewrite import final_number
from daifu.core.version import Version


class SurgeryRefused(Exception):
    """A surgery that cannot be applied; the message says exactly why. Nothing was changed."""


@dataclass
class SurgeryPlan:
    """A validated surgery: the new version, where the run resumes in it, and what it carries over.

    same: the resume point is the faulty statement's own counterpart (not a changed statement).
    finals: the `try ... finally` statements the run is inside, old number to new number, whose
        state (`@fxK`, `@fpK`) the resumed run carries over.
    """

    version: Version
    path: Path
    same: bool
    finals: dict[int, int] = field(default_factory=dict)

    def carry(self, namespace: dict[str, Any]) -> None:
        """Move the state of the enclosing `try ... finally` statements to their new numbers."""
        kept = {new: (namespace.get(f"@fx{old}"), namespace.get(f"@fp{old}")) for old, new in self.finals.items()}
        for name in [n for n in namespace if n.startswith(("@fx", "@fp"))]:
            del namespace[name]
        for k in range(self.version.scope.finals):
            namespace[f"@fx{k}"], namespace[f"@fp{k}"] = kept.get(k, (None, None))


def plan_surgery(old: Version, new: Version, path: Path, known: Collection[str]) -> SurgeryPlan:
    """Validate the new version `new` of a run interrupted at `path` of `old`; `SurgeryRefused` if not.

    `known`: the names the function reads from outside (its module's globals, its closure variables).
    """
    check_same_signature(old.fdef, new.fdef)
    new_path, same, finals = resume_path(old, new, path)
    unknown = sorted(unknown_names(new.module_reads() - old.module_reads(), known))
    if unknown:
        names = ", ".join(repr(n) for n in unknown)
        raise SurgeryRefused(
            f"the new source reads {names}, which nothing defines (not assigned in the new function, "
            "not a parameter, a module global or a builtin)"
        )
    return SurgeryPlan(new, new_path, same, finals)


def refusals(old_source: str, first_lineno: int, filename: str, new_source: str, lineno: int,
             known: Collection[str]) -> list[str]:
    """Why a surgery replacing `old_source` while it runs the statement at file line `lineno` would
    be refused, without a live run (the function as a crash report describes it): the same rule the
    runtime applies (`plan_surgery`), with `known` the names it reads from outside."""
    from daifu.core.blocks import locate, path_of
    from daifu.core.version import build_version

    try:
        old = build_version(0, old_source, first_lineno, filename, 0, (), fast=False)
    except (SyntaxError, ValueError) as error:
        return [f"the crashed function cannot be read: {error}"]
    try:
        new = build_version(1, new_source, first_lineno, filename, 0, (), fast=False)
    except SyntaxError as error:
        return [f"the new source does not compile: line {error.lineno}: {error.msg}"]
    except ValueError as error:
        return [f"the new source is refused: {error}"]
    found = locate(old.fdef.body, lineno, None)
    if found is None:
        return [f"line {lineno} holds no statement of the crashed function"]
    try:
        plan_surgery(old, new, path_of(found[0]), known)
    except SurgeryRefused as refusal:
        return [str(refusal)]
    return []


def check_same_signature(old: ast.FunctionDef, new: ast.FunctionDef) -> None:
    """Refuse a new source that renames the function or changes its parameters or defaults."""
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


# -- names -------------------------------------------------------------------------------------


def unknown_names(reads: set[str], names: Collection[str]) -> set[str]:
    """Of the names a new version reads from its module (`Version.module_reads`: the names it reads
    and never assigns, as the compiler scopes them), those neither in `names` nor builtins.

    Judged on the new code's scopes: a local the new function no longer assigns is read from the
    module now, and unknown even if the crashed frame still holds a stale value of that name. Its
    decorators and default values are not its code's (they were evaluated when the function was
    defined), nor are annotations. `plan_surgery` passes only the reads the crashed version did not
    make: what the change introduces, most often none: then nothing is looked up.
    """
    known = vars(builtins)
    return {name for name in reads if name not in names and name not in known and name != "__class__"}


# -- where the run resumes ---------------------------------------------------------------------


def _shape(node: Any) -> Hashable:
    """A tree's structure as `ast.dump` shows it (node types, fields, values by `repr`, no
    positions), as nested tuples: equal exactly when the dumps are, in half the time."""
    if isinstance(node, ast.AST):
        return (type(node), *[_shape(getattr(node, name, None)) for name in node._fields])
    if isinstance(node, list):
        return tuple([_shape(item) for item in node])
    return repr(node)


def _header_shape(node: ast.stmt) -> Hashable:
    """A statement's kind and header, without the statements of its blocks."""
    shallow = copy.copy(node)
    for name, _block in child_blocks(node):
        if name.startswith(("handlers.", "cases.")):
            continue
        setattr(shallow, name, [])
    if isinstance(node, ast.Match):
        cases = [ast.match_case(pattern=c.pattern, guard=c.guard, body=[]) for c in node.cases]
        setattr(shallow, "cases", cases)  # noqa: B010 - `shallow` is a copy: mypy sees a plain stmt
    if isinstance(node, TRY):
        handlers = [ast.ExceptHandler(type=h.type, name=h.name, body=[]) for h in node.handlers]
        setattr(shallow, "handlers", handlers)  # noqa: B010
    return _shape(shallow)


class _Keys:
    """Keys of the statements of two versions, block against block: small ints, equal when the
    statements are the same.

    Two statements are the same when their trees have the same `shape`. A statement's source text
    determines its tree, and most statements of a surgery have the same text in both versions, so
    shaping is kept for where it can tell something: in a pair of blocks (`pair`), the statements
    whose text only one side has, and every statement of the same kind (`Assign`, `For`...) as one
    of those, are keyed by shape (each distinct text shaped once); the others by their text. So a
    statement only reformatted is not a change, and a block's statements are not all shaped for the
    one that changed. (Two texts both sides have, of a kind no changed statement has, are told
    apart even if they differ in formatting only: that needs the same statement written twice,
    differently, in both versions.) A version parsed from dedented text (`parse_function`'s
    fallback) has columns that are not its source's; its statements are each shaped.
    """

    def __init__(self, old: Version, new: Version, shape: Callable[[ast.stmt], Hashable]) -> None:
        self.shape = shape
        self.old_text, self.new_text = _texts(old), _texts(new)
        self.ids: dict[Hashable, int] = {}
        self.shaped: dict[Hashable, int] = {}

    def _by_shape(self, node: ast.stmt, text: Hashable) -> int:
        found = self.shaped.get(text) if text is not None else None
        if found is None:
            found = self.ids.setdefault(("shape", self.shape(node)), len(self.ids))
            if text is not None:
                self.shaped[text] = found
        return found

    def pair(self, old_block: list[ast.stmt], new_block: list[ast.stmt]
             ) -> tuple[list[int], list[int], Callable[[ast.stmt], int]]:
        """The keys of `old_block` and of `new_block`, and the key function of the new version's
        statements (those of `new_block` as keyed here, any other by its shape)."""
        old_texts = [self.old_text(s) for s in old_block]
        new_texts = [self.new_text(s) for s in new_block]
        shared = (set(old_texts) & set(new_texts)) - {None}
        kinds = {type(s) for s, t in zip(old_block, old_texts) if t not in shared}
        kinds |= {type(s) for s, t in zip(new_block, new_texts) if t not in shared}

        def key(node: ast.stmt, text: Hashable) -> int:
            if text in shared and type(node) not in kinds:
                return self.ids.setdefault(("text", text), len(self.ids))
            return self._by_shape(node, text)

        old_keys = [key(s, t) for s, t in zip(old_block, old_texts)]
        new_keys = [key(s, t) for s, t in zip(new_block, new_texts)]
        paired = {id(s): k for s, k in zip(new_block, new_keys)}

        def new_key(node: ast.stmt) -> int:
            found = paired.get(id(node))
            return found if found is not None else self._by_shape(node, self.new_text(node))

        return old_keys, new_keys, new_key


def _texts(version: Version) -> Callable[[ast.stmt], Hashable]:
    """The source text of each of `version`'s statements, as a key: its lines and its columns on the
    first and last of them (equal keys are equal texts; two statements sharing a line have unequal
    keys, and are then shaped), without slicing and encoding a statement's text; `None` when its
    columns are not its source's."""
    lines = version.lines
    fdef, first = version.fdef, version.first_lineno
    def_line = lines[fdef.lineno - first]
    own_columns = len(def_line) - len(def_line.lstrip()) == fdef.col_offset

    def text(node: ast.stmt) -> Hashable:
        if not own_columns:
            return None
        spanned = lines[node.lineno - first : (node.end_lineno or node.lineno) - first + 1]
        return node.col_offset, node.end_col_offset, *spanned

    return text


def _is_try(node: ast.stmt) -> bool:
    return type(node).__name__ in ("Try", "TryStar")


def _contains(block: list[ast.stmt], wanted: set[int], key: Callable[[ast.stmt], int]) -> bool:
    """Whether `block`, or the body of a `try` in it (at any depth of `try`s), holds a statement
    whose key is in `wanted`."""
    return any(key(s) in wanted or (_is_try(s) and _contains(s.body, wanted, key)) for s in block)  # type: ignore[attr-defined]


def _map_index(old_keys: list[int], new_keys: list[int], index: int) -> int | None:
    if old_keys == new_keys:  # what the matcher finds, without it: the block around a change is the same
        return index
    matcher = difflib.SequenceMatcher(None, old_keys, new_keys, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if i1 <= index < i2 and (tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1)):
            return j1 + index - i1
    return None


def _unwrap(
    old_keys: set[int], new_block: list[ast.stmt], wanted: set[int], key: Callable[[ast.stmt], int]
) -> tuple[list[Any], list[ast.stmt]]:
    """Descend into new `try` statements that wrap the statements `wanted` (by `key`).

    Returns the path steps into the wrappers and the innermost wrapped block (`new_block` itself
    when nothing wraps them). A wrapper is a `try` whose key is not among `old_keys`, those of
    the old block.
    """
    steps: list[Any] = []
    while not any(key(s) in wanted for s in new_block):
        wrappers = [
            j for j, s in enumerate(new_block)
            if _is_try(s) and key(s) not in old_keys and _contains(s.body, wanted, key)  # type: ignore[attr-defined]
        ]
        if len(wrappers) != 1:
            break
        steps += [wrappers[0], "body"]
        new_block = new_block[wrappers[0]].body  # type: ignore[attr-defined]
    return steps, new_block


def resume_path(old: Version, new: Version, path: Path) -> tuple[Path, bool, dict[int, int]]:
    """The path in `new` where a run interrupted at `path` of `old` resumes.

    Returns the path, whether it is the faulty statement's own counterpart (False: a changed
    statement, to be run from its start), and the enclosing `try ... finally` statements' numbers
    (old to new). The run resumes at the first changed statement earlier in the iteration it is
    running (`blocks.iteration_start`), at whatever level of nesting: a statement before the
    faulty one in its block, or before the statement holding it in an enclosing block (or a
    statement holding such a change: the `try` whose body changed, for a run in its handler).
    A compound statement whose header raised is its own counterpart when only its blocks changed:
    a `for` whose iterator raised goes on with the next item, as after a retry, instead of
    starting over.
    """
    if new.derived_from is old and new.change is not None:
        return _across(new.change, old, new, path)
    headers, statements = _Keys(old, new, _header_shape), _Keys(old, new, _shape)
    top = iteration_start(old.fdef, path)
    old_block: list[ast.stmt] = old.fdef.body
    new_block: list[ast.stmt] = new.fdef.body
    new_path: list[Any] = []
    finals: dict[int, int] = {}
    for level in range(0, len(path) - 1, 2):
        index, field_name = path[level], path[level + 1]
        old_node = old_block[index]
        old_keys, new_keys, new_header = headers.pair(old_block, new_block)
        steps, inner = _unwrap(set(old_keys), new_block, {old_keys[index]}, new_header)
        outer = new_block
        if steps:
            new_block, new_keys = inner, [new_header(s) for s in inner]
        mapped = _map_index(old_keys, new_keys, index)
        new_node = new_block[mapped] if mapped is not None else None
        if mapped is None or new_node is None or new_header(new_node) != old_keys[index]:
            raise SurgeryRefused(_changed_enclosing(old_node, new_block))
        if level >= top:  # a change earlier in the interrupted iteration, at this level
            earlier = _earlier_change(statements, old_block[:index], outer, steps, mapped)
            if earlier is None and _changed_before_clause(statements, old_node, new_node, field_name):
                earlier = (*steps, mapped)
            if earlier is not None:
                return tuple(new_path + list(earlier)), False, finals
        new_path += steps
        if getattr(old_node, "finalbody", None) and getattr(new_node, "finalbody", None):
            finals[final_number(old_node)] = final_number(new_node)
        try:
            old_block, new_block = block_of(old_node, field_name), block_of(new_node, field_name)
        except (KeyError, IndexError):
            raise SurgeryRefused(f"the new source removes the block of line {old_node.lineno} that is running") from None
        new_path += [mapped, field_name]
    index = path[-1]
    old_keys, new_keys, new_statement = statements.pair(old_block, new_block)
    steps, inner = _unwrap(set(old_keys), new_block, set(old_keys), new_statement)
    if steps:
        new_path += steps
        new_block, new_keys = inner, [new_statement(s) for s in inner]
    first = _common_prefix(old_keys, new_keys)
    if first > index:  # the faulty statement and all before it are the same (or nothing changed)
        return tuple(new_path + [index]), True, finals
    matcher = difflib.SequenceMatcher(None, old_keys[first:], new_keys[first:], autojunk=False)
    tag, i1, i2, j1, j2 = matcher.get_opcodes()[0]
    own = tag == "replace" and first == index and i2 - i1 == j2 - j1  # the faulty statement changed
    if own:
        own = _same_header(old_block[index], new_block[first])
    return tuple(new_path + [first]), own, finals


def _common_prefix(old_keys: list[int], new_keys: list[int]) -> int:
    """How many statements two blocks (by their keys) start with in common: the first changed one
    is the next. A statement inserted after one just like it is the second (as the source lines
    tell, `changes.changed_lines`), not the first."""
    shortest = min(len(old_keys), len(new_keys))
    first = 0
    while first < shortest and old_keys[first] == new_keys[first]:
        first += 1
    return first


def _earlier_change(keys: _Keys, old_before: list[ast.stmt], new_block: list[ast.stmt], steps: list[Any],
                    mapped: int) -> tuple[Any, ...] | None:
    """Where the first changed statement before the statement holding the run is, in a block of the
    interrupted iteration: a path relative to `new_block` (inside the new `try` statements that
    `steps` enter, if any), or `None` when the statements before it are the old ones,
    `old_before`. When some were only removed, the statement holding the run is run again."""
    old_keys, _new_keys, new_key = keys.pair(old_before, new_block)
    before: list[tuple[tuple[Any, ...], int]] = []
    block = new_block
    prefix: tuple[Any, ...] = ()
    for wrapper in steps[0::2]:
        before += [((*prefix, j), new_key(block[j])) for j in range(wrapper)]
        prefix, block = (*prefix, wrapper, "body"), block[wrapper].body  # type: ignore[attr-defined]
    before += [((*prefix, j), new_key(block[j])) for j in range(mapped)]
    first = _common_prefix(old_keys, [key for _place, key in before])
    if first == len(old_keys) == len(before):
        return None
    return before[first][0] if first < len(before) else (*prefix, mapped)


def _changed_before_clause(keys: _Keys, old: ast.stmt, new: ast.stmt, field_name: str) -> bool:
    """Whether the run, inside clause `field_name` of a `try` (a handler, `else`), is past a body
    that changed: the `try` is then run again from its start."""
    if not isinstance(old, TRY) or field_name == "body":
        return False
    old_keys, new_keys, _key = keys.pair(old.body, new.body)  # type: ignore[attr-defined]
    return old_keys != new_keys


def _same_header(old: ast.stmt, new: ast.stmt) -> bool:
    """Whether a compound statement whose header raised is the same but for its blocks: the run
    resumes at its header as it would have without the surgery (a `for` goes on with its iterator)."""
    return isinstance(old, COMPOUND) and _header_shape(old) == _header_shape(new)


def _across(change: Change, old: Version, new: Version, path: Path) -> tuple[Path, bool, dict[int, int]]:
    """`resume_path` for a version derived from `old` with `change`, a run of simple statements of one
    block replaced (`daifu.core.changes`): every other statement is the old one, at the same path or,
    after the run in its block, moved by the difference in length. Only the run is matched, statement
    against statement, as `resume_path` matches a block. A run interrupted after a changed statement
    of the iteration it is running (`blocks.iteration_start`) resumes at the first one, whatever
    the nesting: in its own block, or in an enclosing block before the statement holding it; one
    interrupted after a statement that holds the change (or in the body of a `try` whose handler it
    is in) resumes at that statement; one whose header raised goes on there when the change is
    inside it."""
    finals: dict[int, int] = {}
    block = old.fdef.body
    for level in range(0, len(path) - 1, 2):  # no `try` changed: each keeps its number
        node = block[path[level]]
        if getattr(node, "finalbody", None):
            finals[final_number(node)] = final_number(node)
        block = block_of(node, path[level + 1])
    old_keys, new_keys, _key = _Keys(old, new, _shape).pair(change.old, change.new)
    depth = len(change.block)
    moved = path
    if len(path) > depth and path[:depth] == change.block and path[depth] >= change.start + len(change.old):
        moved = (*change.block, path[depth] + len(change.new) - len(change.old), *path[depth + 1 :])
    if old_keys == new_keys:  # reformatted, or only comments changed
        return moved, True, finals
    top = iteration_start(old.fdef, path)
    shared = _common_prefix(list(change.block), list(path))
    if shared == len(path):  # inside the statement whose header raised, which goes on as it was
        return path, True, finals
    if shared < depth:  # the change is inside a statement of a block around the run, or beside it
        if shared % 2 == 0 and change.block[shared] < path[shared] and shared >= top:
            return (*path[:shared], change.block[shared]), False, finals  # a statement before, run again
        holder = node_at(old.fdef, path[:shared]) if shared % 2 else None
        if isinstance(holder, TRY) and change.block[shared] == "body" and shared - 1 >= top:
            return path[:shared], False, finals  # the body of the `try` whose handler or `else` runs
        return path, True, finals
    if depth < top or path[depth] < change.start:  # outside the iteration, or after the run
        return moved, True, finals
    first = _common_prefix(old_keys, new_keys)
    offset = path[depth] - change.start
    if first <= offset:
        return (*change.block, change.start + first), False, finals
    return moved, True, finals


def _changed_enclosing(old_node: ast.stmt, new_block: list[ast.stmt]) -> str:
    kind = HEADER_KINDS.get(type(old_node), type(old_node).__name__.lower())
    wrapped = [s for s in new_block if not _is_try(s) and isinstance(s, (ast.With, ast.If, ast.For, ast.While))]
    reason = (
        f"the new source changes the header of the enclosing `{kind}` statement at line {old_node.lineno}, "
        "inside which the program is running; change only the statements inside it"
    )
    if wrapped and len(new_block) < 3:
        reason += " (only a new `try` may wrap the running block: the run cannot resume inside a statement it never entered)"
    return reason


# -- how wide a change is ----------------------------------------------------------------------

_BLOCKS = (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try) + (
    (ast.TryStar,) if hasattr(ast, "TryStar") else ()
)
"""Statements whose bodies are blocks; `if` and `match` bodies belong to the enclosing block."""


def outside_block(old: ast.AST, new: ast.AST, line: int) -> list[str]:
    """Why the change reaches beyond the innermost block (loop, with, try, body) holding file line
    `line` (empty when it does not): the two trees, with that block emptied, differ."""
    owner_path, key = _block_at(old, line)
    old_owner, new_owner = _follow(old, owner_path), _follow(new, owner_path)
    wide = [f"the surgery changes code outside the block that contains line {line} (a wider change needs a person's approval)"]
    if new_owner is None or old_owner is None or type(new_owner) is not type(old_owner):
        return wide
    return [] if _without(old, old_owner, key) == _without(new, new_owner, key) else wide


def _without(tree: ast.AST, owner: ast.AST, key: str) -> str:
    """`tree` dumped with the statement list `key` of `owner` emptied, and no decorators; the tree is
    changed only while it is dumped."""
    block = _get_list(owner, key) or []
    decorators = getattr(tree, "decorator_list", [])
    _set_list(owner, key, [])
    setattr(tree, "decorator_list", [])  # noqa: B010
    try:
        return ast.dump(tree)
    finally:
        _set_list(owner, key, block)
        setattr(tree, "decorator_list", decorators)  # noqa: B010


def _lists(node: ast.AST) -> list[tuple[str, list[ast.stmt]]]:
    """The statement lists directly inside `node`, each under a key `_follow` understands."""
    found = [
        (f, getattr(node, f))
        for f in ("body", "orelse", "finalbody")
        if isinstance(getattr(node, f, None), list) and getattr(node, f) and isinstance(getattr(node, f)[0], ast.stmt)
    ]
    found += [(f"handlers.{i}", h.body) for i, h in enumerate(getattr(node, "handlers", None) or [])]
    found += [(f"cases.{i}", c.body) for i, c in enumerate(getattr(node, "cases", None) or [])]
    return found


def _block_at(func: ast.AST, line: int) -> tuple[list[tuple[str, int]], str]:
    """The path to the owner of the innermost block holding `line`, and that block's key."""
    path: list[tuple[str, int]] = []
    owner: tuple[list[tuple[str, int]], str] = ([], "body")
    node = func
    while True:
        for key, items in _lists(node):
            hit = next((i for i, s in enumerate(items) if s.lineno <= line <= (s.end_lineno or s.lineno)), None)
            if hit is not None:
                if node is func or isinstance(node, _BLOCKS):
                    owner = (list(path), key)
                path.append((key, hit))
                node = items[hit]
                break
        else:
            return owner


def _get_list(node: ast.AST, key: str) -> list[ast.stmt] | None:
    name, _, index = key.partition(".")
    value = getattr(node, name, None)
    if index:
        value = value[int(index)].body if isinstance(value, list) and int(index) < len(value) else None
    return value if isinstance(value, list) else None


def _set_list(node: ast.AST, key: str, value: list[ast.stmt]) -> None:
    name, _, index = key.partition(".")
    setattr(getattr(node, name)[int(index)] if index else node, "body" if index else name, value)


def _follow(node: ast.AST, path: list[tuple[str, int]]) -> ast.AST | None:
    for key, index in path:
        items = _get_list(node, key)
        if items is None or index >= len(items):
            return None
        node = items[index]
    return node
