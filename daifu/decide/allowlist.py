"""What code from the repair bot may run without a person: a small allowlisted language.

An LLM's output is attacker-influenced (crash messages and file contents reach its prompt), so code
that `approve="auto"` applies unattended must stay inside a language small enough to read:

- statements: assignments (plain, augmented, annotated), expression statements, `if`, `for`, `assert`,
  `raise`, `pass`, `break`, `continue`, `return`, `del` of names the code itself binds, `import` of the
  modules in `IMPORTS` (with `as`), `with` of the context managers in `CONTEXT_MANAGERS`, and `try`
  whose every handler names specific exceptions (not bare, `Exception` or `BaseException`);
- expressions: literals, arithmetic, comparisons, boolean logic, `x if c else y`, subscripts and slices,
  list/tuple/dict/set displays, comprehensions, f-strings, and lambdas passed straight to a call;
- calls, whose callee must be, syntactically, one of: a builtin in `BUILTINS`; a dotted path in `CALLS`
  reached through a module (`torch.cuda.empty_cache`, `F.relu` where `F` is `torch.nn.functional`); a
  method in `METHODS` (`x.float()`), in `CONTAINER_METHODS` on a name known to hold a list, dict or set
  (`losses.append(...)`), or in `STRING_METHODS` on a name known to hold a string; or a callee the
  vaccinated function already calls (`model(x)`, `optimizer.zero_grad()`, `cnn.accuracy(...)`), checked
  against its live value (`context_for`) so that a callable from `os`, `subprocess`, `pickle`... never is.

Refused, each with the line: attributes whose name starts with `_` (dunders and private names), names
starting with `__`, builtins not in `BUILTINS` (`eval`, `getattr`, `vars`, `open`, `type`...), modules used
as values (`shell = os`), module attributes outside `CALLS`/`VALUES` (`os.environ`, `sys.modules`),
imports outside `IMPORTS` and every `from x import *`, `while`, `def`, `class`, `global`, `nonlocal`,
`async`, `await`, `yield`, `match`, `:=`, calls whose callee is computed (`fns[0](x)`, `type(x)(y)`), names
the code binds and then calls (aliasing), assignments that shadow a module or a builtin, `time.sleep`
without a literal bound of `MAX_SLEEP_S`, and literal sizes beyond `MAX_INT`, `MAX_ELEMENTS`, `MAX_RANGE`.

A surgery is the vaccinated function's new source: its `def` line (decorators, parameters, defaults,
annotations) must be the running one's, and only its body statements that differ from the running
source are held to the allowlist — unchanged statements are the user's own code. Statements are
aligned block by block (`difflib` on their ASTs); a compound statement that changed keeps its body
aligned with the old one, so a changed `for` header is checked without re-checking its whole body.
A `patch_function` is checked the same way against the callee's running source, and its target must
be a user function on the crash's stack.

This is the static layer; the trial sandbox (issue 17) is the dynamic one. Values the code computes
from the user's state (a `range(n)` over a huge `n`) are bounded by that state, not here.

The tables are in `daifu.decide.allowlist_tables`, the walk over the code in
`daifu.decide.allowlist_check`, and what the live frame tells (modules, callables, containers) in
`daifu.decide.allowlist_context`.
"""

from __future__ import annotations

import ast
import copy
import difflib
from collections.abc import Iterator
from typing import Protocol

from daifu.decide.allowlist_check import Checker, parse_code
from daifu.decide.allowlist_context import Context, build_context, context_for
from daifu.decide.allowlist_tables import (
    BUILTINS,
    CALLS,
    CONTAINER_METHODS,
    CONTEXT_MANAGERS,
    IMPORTS,
    MAX_ELEMENTS,
    MAX_INT,
    MAX_RANGE,
    MAX_SLEEP_S,
    METHODS,
    STRING_METHODS,
    VALUES,
)
from daifu.decide.suggestions import CheckResult

__all__ = [
    "BUILTINS",
    "CALLS",
    "CONTAINER_METHODS",
    "CONTEXT_MANAGERS",
    "IMPORTS",
    "MAX_ELEMENTS",
    "MAX_INT",
    "MAX_RANGE",
    "MAX_SLEEP_S",
    "METHODS",
    "STRING_METHODS",
    "VALUES",
    "Context",
    "build_context",
    "changed_statements",
    "check_patch_safety",
    "check_safety",
    "check_suggestion",
    "check_surgery_safety",
    "context_for",
]


class SuggestionLike(Protocol):
    """What the check needs of a bot suggestion (`repairbot.protocol.Suggestion` has it)."""

    @property
    def kind(self) -> str: ...
    @property
    def code(self) -> str: ...
    @property
    def target(self) -> str | None: ...


def check_suggestion(suggestion: SuggestionLike, context: Context, code: str | None = None) -> CheckResult:
    """Whether `suggestion` may be applied without a person; `code` overrides its code (a restored surgery)."""
    text = suggestion.code if code is None else code
    if suggestion.kind == "surgery":
        return check_surgery_safety(text, context)
    if suggestion.kind == "patch_function":
        return check_patch_safety(text, suggestion.target or "", context)
    if suggestion.kind == "action":
        return check_safety(text, context)
    return CheckResult()


def check_safety(code: str, context: Context | None = None) -> CheckResult:
    """Whether action `code` stays inside the allowlisted language (module docstring) in `context`."""
    tree = parse_code(code, "the action")
    if isinstance(tree, str):
        return CheckResult((tree,))
    return _verdict(tree.body, context or Context(), deletable=_stores(tree.body), parameters=frozenset())


def check_surgery_safety(source: str, context: Context) -> CheckResult:
    """Whether a surgery's new `def` changes only body statements, and those stay inside the allowlist."""
    return _check_def(source, context.source, context, "the surgery")


def check_patch_safety(source: str, target: str, context: Context) -> CheckResult:
    """Whether a `patch_function` reaches a user function on the stack and changes it as a surgery may."""
    callee = context.callees.get(target)
    if callee is None:
        return CheckResult((f"its target {target!r} is not a user function on the crash's stack",))
    return _check_def(source, callee.source, callee, "the patch")


def _check_def(source: str, running: str, context: Context, what: str) -> CheckResult:
    new = _one_def(source, what)
    if isinstance(new, str):
        return CheckResult((new,))
    old = _one_def(running, "the running function") if running else None
    old_def = old if isinstance(old, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
    if old_def is not None and _header(old_def) != _header(new):
        return CheckResult(
            (
                f"line {new.lineno}: {what} changes the def line (name, decorators, parameters, defaults or "
                "annotations); only its body may change without a person",
            )
        )
    if isinstance(new, ast.AsyncFunctionDef):
        return CheckResult((f"line {new.lineno}: an async function cannot be changed without a person",))
    changed = list(changed_statements(old_def.body if old_def else [], new.body))
    parameters = frozenset(
        a.arg
        for d in ast.walk(new)
        if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef))  # nested defs' too; lambdas' stay in them
        for a in ast.walk(d.args)
        if isinstance(a, ast.arg)
    )
    return _verdict(changed, context, deletable=_stores(new.body), parameters=parameters)


def _one_def(source: str, what: str) -> ast.FunctionDef | ast.AsyncFunctionDef | str:
    tree = parse_code(source, what)
    if isinstance(tree, str):
        return tree
    if len(tree.body) != 1 or not isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return f"{what} must be exactly one function definition"
    return tree.body[0]


def _header(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """The def line as data: name, decorators, parameters with defaults and annotations, return annotation."""
    shallow = copy.copy(node)
    shallow.body = []
    return ast.dump(shallow)


def _stores(statements: list[ast.stmt]) -> frozenset[str]:
    """The names `statements` assign or import in their own scope: the names of its own the code may read
    before the frame has them, and the only names its `del` may remove. A lambda's parameters and a
    comprehension's variables stay inside it, as in Python, so they are left out."""
    found: set[str] = set()
    pending: list[ast.AST] = list(statements)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update(a.asname or a.name.split(".")[0] for a in node.names)
        pending.extend(ast.iter_child_nodes(node))
    return frozenset(found)


def _verdict(
    statements: list[ast.stmt], context: Context, *, deletable: frozenset[str], parameters: frozenset[str]
) -> CheckResult:
    checker = Checker(context, statements, deletable, parameters)
    try:
        for statement in statements:
            checker.statement(statement)
    except RecursionError:
        checker.refuse(statements[0] if statements else None, "the code is nested too deeply to check")
    return CheckResult(tuple(dict.fromkeys(checker.reasons)))


# -- which statements of a surgery changed -----------------------------------------------------------

_BODIES = ("body", "orelse", "finalbody")


def changed_statements(old: list[ast.stmt], new: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of `new` that are not the same statements of `old` in the same place.

    A changed compound statement whose counterpart is found yields only its header (its bodies
    emptied) when the header changed, then the changed statements of its bodies.
    """
    matcher = difflib.SequenceMatcher(None, [ast.dump(s) for s in old], [ast.dump(s) for s in new], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        unmatched = list(old[i1:i2])
        for statement in new[j1:j2]:
            twin = next((o for o in unmatched if type(o) is type(statement) and _is_compound(o)), None)
            if twin is None:
                yield statement
                continue
            unmatched.remove(twin)
            yield from _changed_compound(twin, statement)


def _is_compound(node: ast.stmt) -> bool:
    return any(isinstance(getattr(node, name, None), list) and getattr(node, name) for name in ("body", "handlers"))


def _changed_compound(old: ast.stmt, new: ast.stmt) -> Iterator[ast.stmt]:
    if ast.dump(_header_only(old)) != ast.dump(_header_only(new)):
        yield _header_only(new)
    for name in _BODIES:
        yield from changed_statements(getattr(old, name, None) or [], getattr(new, name, None) or [])
    old_handlers, new_handlers = getattr(old, "handlers", []), getattr(new, "handlers", [])
    for index, handler in enumerate(new_handlers):
        before = old_handlers[index].body if index < len(old_handlers) else []
        yield from changed_statements(before, handler.body)


def _header_only(node: ast.stmt) -> ast.stmt:
    """`node` with every body emptied to `pass`: what is left is its header (and its handlers' types)."""
    shallow = copy.copy(node)
    for name in _BODIES:
        if getattr(shallow, name, None):
            setattr(shallow, name, [ast.Pass(lineno=node.lineno, col_offset=0)])
    if getattr(shallow, "handlers", None):
        shallow.handlers = [  # type: ignore[attr-defined]
            ast.ExceptHandler(type=h.type, name=h.name, body=[ast.Pass()], lineno=h.lineno, col_offset=0)
            for h in shallow.handlers  # type: ignore[attr-defined]
        ]
    return shallow
