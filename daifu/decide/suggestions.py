"""Checks on a repair suggestion before it is shown or applied.

`check_surgery` and `check_action` say whether the code can be applied at all; whether it may run
without a person approving it (`approve="auto"`) is `daifu.allowlist`'s question. Every check walks
the AST, never the text, and returns all its reasons, so the console can show why a fix was refused.
"""

from __future__ import annotations

import ast
import builtins
import textwrap
from dataclasses import dataclass
from collections.abc import Collection, Iterator

from daifu.core.surgery import outside_block, unknown_names
from repairbot.protocol import FunctionInfo


@dataclass(frozen=True)
class Verdict:
    """Whether a suggestion passed, and if not, every reason why."""

    reasons: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.reasons

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        return "ok" if self.ok else "; ".join(self.reasons)


def check_action(code: str) -> Verdict:
    """An action must compile as statements."""
    try:
        compile(code, "<daifu action>", "exec", dont_inherit=True)
    except SyntaxError as error:
        return Verdict((f"the action does not compile: {error.msg} (line {error.lineno})",))
    return Verdict()


def check_surgery(
    source: str, function: FunctionInfo, *, names: Collection[str] | None = None, allow_wide: bool = False
) -> Verdict:
    """A surgery must define the same function, compile, and change only the block that crashed.

    `names` are those the function can see (locals, globals); with it, every name the new code
    loads must exist, be assigned in the function, or be a builtin. Without it that check is skipped.
    """
    new = _one_def(source, "the surgery")
    old = _one_def(function.source, "the crashed function")
    if isinstance(new, str) or isinstance(old, str):
        return Verdict(tuple(r for r in (new, old) if isinstance(r, str)))
    reasons = list(_same_signature(old, new))
    try:
        compile(textwrap.dedent(source), function.filename, "exec", dont_inherit=True)
    except SyntaxError as error:
        reasons.append(f"the surgery does not compile: {error.msg}")
    if not allow_wide and not reasons:
        reasons += outside_block(old, new, function.lineno - function.first_lineno + 1)
    if names is not None:
        reasons += [f"the surgery uses {n!r}, which is not defined" for n in sorted(unknown_names(new, names))]
    return Verdict(tuple(reasons))


def _one_def(source: str, what: str) -> ast.FunctionDef | ast.AsyncFunctionDef | str:
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError as error:
        return f"{what} does not parse: {error.msg} (line {error.lineno})"
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if len(tree.body) != 1 or len(defs) != 1:
        return f"{what} must be exactly one function definition"
    return defs[0]


def _same_signature(
    old: ast.FunctionDef | ast.AsyncFunctionDef, new: ast.FunctionDef | ast.AsyncFunctionDef
) -> Iterator[str]:
    if new.name != old.name:
        yield f"the surgery defines {new.name!r}, not {old.name!r}"
    if _parameters(new) != _parameters(old):
        before, after = ", ".join(_parameters(old)), ", ".join(_parameters(new))
        yield f"the surgery changes the parameters from ({before}) to ({after})"
    if type(new) is not type(old):
        yield "the surgery changes whether the function is async"


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = node.args
    names = [p.arg for p in a.posonlyargs] + ["/"] * bool(a.posonlyargs) + [p.arg for p in a.args]
    names += ["*" + a.vararg.arg] if a.vararg else (["*"] if a.kwonlyargs else [])
    names += [p.arg for p in a.kwonlyargs] + (["**" + a.kwarg.arg] if a.kwarg else [])
    return names


_BLOCKS = (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.TryStar)
"""Statements whose bodies are blocks; `if` and `match` bodies belong to the enclosing block."""


def _outside_block(old: ast.AST, new: ast.AST, line: int) -> list[str]:
    """Reasons the change reaches beyond the innermost block (loop, with, try, body) holding `line`."""
    owner_path, key = _block_at(old, line)
    old_rest, new_rest = copy.deepcopy(old), copy.deepcopy(new)
    old_owner, new_owner = _follow(old_rest, owner_path), _follow(new_rest, owner_path)
    if new_owner is None or old_owner is None or type(new_owner) is not type(old_owner):
        return [_WIDE.format(line=line)]
    _set_list(old_owner, key, [])
    _set_list(new_owner, key, [])
    return [] if ast.dump(old_rest) == ast.dump(new_rest) else [_WIDE.format(line=line)]


_WIDE = (
    "the surgery changes code outside the block that contains line {line} of the function "
    "(approve a wider change to apply it)"
)


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
    field, _, index = key.partition(".")
    value = getattr(node, field, None)
    if index:
        value = value[int(index)].body if isinstance(value, list) and int(index) < len(value) else None
    return value if isinstance(value, list) else None


def _set_list(node: ast.AST, key: str, value: list[ast.stmt]) -> None:
    field, _, index = key.partition(".")
    setattr(getattr(node, field)[int(index)] if index else node, "body" if index else field, value)


def _follow(node: ast.AST, path: list[tuple[str, int]]) -> ast.AST | None:
    for key, index in path:
        items = _get_list(node, key)
        if items is None or index >= len(items):
            return None
        node = items[index]
    return node


def unknown_names(node: ast.AST, names: Collection[str]) -> set[str]:
    """Names `node` loads that it never binds and that are neither in `names` nor builtins."""
    bound: set[str] = set()
    loaded: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            (loaded if isinstance(n.ctx, ast.Load) else bound).add(n.id)
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in n.names)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            bound.add(n.name)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            bound.update(n.names)
    return loaded - bound - set(names) - set(dir(builtins))
