"""What code from the repair bot may run without a person: the admission rule, and its check.

An LLM's output is attacker-influenced (crash messages and file contents reach its prompt), so what
`approve="auto"` applies unattended is judged by what it does, not by how it is spelled.

The rule. A repair answers a crash by computing differently; the crash is in the program's
computation, so that is all a repair needs to do. It is admitted when everything it reaches is:

1. what the crashed function already calls, resolved to the same live object (`model(x)`,
   `optimizer.zero_grad()`, `np.median` where the function called `np.median`, under any alias);
2. a pure function of the numeric libraries — torch, numpy, math, cmath, statistics — or a pure
   method of a tensor or array (`.float()`, `.to_dense()`, `.detach().numpy()`, `np.median`,
   `torch.where`; `daifu.decide.allowlist_numeric`), a builtin of `BUILTINS`, a layer, and the few
   other callables of `CALLS` (constructors, `os.path` functions, a bounded `time.sleep`);
3. the program's own functions and classes (defined in its files), when they reach nothing below;
4. the program's own values: containers it changes (`history.setdefault("val_acc", []).append(v)`),
   strings, attributes.

It is never admitted when anything it reaches touches the system — files, processes, the network,
the environment, code loading, or the introspection that leads to those (`daifu.decide.allowlist_system`):
a module that reaches the system (`os` beyond its path functions, `shutil`, `subprocess`, `socket`,
`ctypes`, `importlib`, `pickle`, `sys`, logging and telemetry libraries), a method of the system's types
(`Path.touch`, `.chmod`, `.unlink`, `.write_text`, a file's `.write`), builtins that introspect or load
(`getattr`, `__import__`, `globals`, `vars`, `open`, `eval`, `exec`, `type`), private and dunder
attributes, readers of files (`np.load`, `np.fromfile`, `torch.load`, `torch.from_file`,
`Path.read_text`) and of the environment (`os.environ`, `/proc`). This holds wherever the callable
appears: a callable handed to something that calls it is a call (`list(map(Path(f).touch, modes))`,
`max(xs, key=p.chmod)`, `DataLoader(ds, collate_fn=os.remove)`, a frame name holding `rmtree`).

Nor is it admitted when an in-place update in it lands on a fresh copy nothing keeps
(`target.float().mul_(0.9)`: the statement then does nothing; `daifu.decide.discarded_update`).

Nor is it admitted when it aims the program's own effects (`daifu.decide.allowlist_flow`): names it
binds or changes that flow, in the function it runs in, into what aims a statement of the program that
reaches the system — a file's path, a command, a logger — or into the condition that decides whether
one runs (`stale_files = [victim]` before the program's `os.remove` loop, `cleanup = True` over its
`rmtree`, `checkpoint = elsewhere` before its `torch.save`), nor when it calls a function of the
program that reaches the system itself (`daifu.decide.allowlist_reach`). One exception, the program's
own data: a read of the program's (`torch.load(path)`) pointed at another existing file, written out,
in the folder of the path the name held.

Nor is an action admitted when it rebinds a module-level name the function only reads and that name
decides, through a condition, whether a statement of the program reaching the system runs
(`MONITOR = 'loss'` before `if metrics[MONITOR] > best: torch.save(...)`): module state every reader
sees, and the same decision a surgery changing that condition needs a person for.

A call the crashed statement made is admitted when the repair makes it again with the same arguments
(`daifu.decide.made_calls`: literals and locals holding immutable values, none of which the repair binds):
it reaches what the program reached (`torch.load(path, weights_only=True)` kept in the fix of the statement
whose `load_state_dict` raised on the keys it returned).

The language the check reads is kept small enough to read: assignments, expression statements, `if`,
`for`, `assert`, `raise`, `pass`, `break`, `continue`, `return`, `del` of names the code binds,
`import` of `IMPORTS`, `with` of `CONTEXT_MANAGERS`, `try` whose handlers name specific exceptions;
literals, arithmetic, comparisons, boolean logic, `x if c else y`, subscripts, displays,
comprehensions, f-strings and lambdas passed straight to a call. Refused besides: `while`, `def`,
`class`, `global`, `nonlocal`, `async`, `yield`, `match`, `:=`, computed callees (`fns[0](x)`), names the
code binds then calls, assignments that shadow a module or a builtin, `time.sleep` without a literal
bound of `MAX_SLEEP_S`, and literal sizes beyond `MAX_INT`, `MAX_ELEMENTS`, `MAX_RANGE`.

A surgery is the vaccinated function's new source: its `def` line must be the running one's, and
the statements that differ from the running source are held to the rule (aligned block by block,
`difflib` on their ASTs). A compound statement whose header changed is the change's whole: its
header is checked as code, and the program's statements in its unchanged body that reach the system
need a person (`if True:` over the program's `rmtree`). A `patch_function` is checked the same way
against the callee's running source, and its target must be a user function on the crash's stack.
Every reason names a line of the file (a surgery's as its new version will have it), or a line of
the action.

One shape of `.backward()`, which is otherwise refused, is admitted: the gradients of the step accumulated
over micro-batches, whose shares sum to one (`daifu.decide.allowlist_accumulate`).

This is the static layer. The dynamic one is the trial (`daifu.core.trial`): unattended, an effect
the repair's own code reaches there fails it (`daifu.decide.trial_effects`), but creating the folder a
failing write needs.

The tables are in `allowlist_tables`, the numeric libraries in `allowlist_numeric`, the system in
`allowlist_system`; the walk over the code in `allowlist_check`; what the live frame tells in
`allowlist_context`, judging each live callable in `allowlist_callables`; what the program's code
reaches in `allowlist_reach`; where a repair's names flow in `allowlist_flow`.
"""

from __future__ import annotations

import ast
import copy
import functools
import os
from collections.abc import Iterator
from typing import Protocol

from daifu.core.changes import BODIES, header_only, statement_changes
from daifu.decide.allowlist_accumulate import admitted_backwards
from daifu.decide.discarded_update import discarded_updates
from daifu.decide.allowlist_check import Checker, parse_code, parse_running
from daifu.decide.allowlist_context import Context, build_context, context_for
from daifu.decide.allowlist_flow import aimed_effects, decided_effects
from daifu.decide.allowlist_reach import Reach
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
    "changed_lines",
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
    context = context or Context()
    checked = _verdict(tree.body, context, deletable=_stores(tree.body), parameters=frozenset(), first_lineno=None)
    checked = CheckResult(checked.reasons + discarded_updates(tree.body))
    running = parse_running(context.source) if context.source else None
    if isinstance(running, str) or running is None:
        return checked
    aimed = _aimed(running, tree.body, context, context.first_lineno, "the action")
    return CheckResult(checked.reasons + aimed + _settings_deciding_effects(running, tree.body, context))


def _settings_deciding_effects(running: ast.Module, action: list[ast.stmt], context: Context) -> tuple[str, ...]:
    """Why an action rebinding a module-level name the function only reads needs a person: the program's
    own statements reaching the system run or not by a condition reading it (module state every reader
    of the name sees; the same decision a surgery changing that condition would need a person for)."""
    function = next((n for n in running.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if function is None:
        return ()
    settings = frozenset(name for name in _stores(action) - _own_names(function) if name in context.values)
    if not settings:
        return ()
    reach = Reach(context.values, context.module, context.modules)
    reasons = []
    for decided in decided_effects(function, settings, reach.call, context.methods, frozenset(context.modules)):
        reasons.append(_effect_reason(
            context.first_lineno + decided.lineno - 1, decided.effect, decided.through,
            f" under a condition reading {_named(decided.names)}, and the action rebinds a module-level name the "
            "function only reads: whether it runs is the action's doing, which needs a person",
        ))
    return tuple(dict.fromkeys(reasons))


@functools.lru_cache(maxsize=16)
def _own_names(function: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
    """The names `function` binds in its body or as parameters; kept per tree (`parse_running`)."""
    return _stores(function.body) | {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}


def _effect_reason(lineno: int, effect: str, through: str, why: str) -> str:
    """One refusal reason about a statement of the program that reaches the system: the same opening
    for every rule that refuses a repair for its part in such a statement, so they read alike."""
    via = f" ({through})" if through else ""
    return f"line {lineno}: the program's own `{effect}`{via} reaches files, processes or the network{why}"


def _named(names: tuple[str, ...]) -> str:
    """The first few names a reason cites, quoted."""
    return ", ".join(f"`{name}`" for name in names[:4])


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
    new = _one_def(source, what, context.first_lineno)
    if isinstance(new, str):
        return CheckResult((new,))
    old = _one_def(running, "the running function") if running else None
    old_def = old if isinstance(old, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
    line = f"line {context.first_lineno + new.lineno - 1}"
    if old_def is not None and _header(old_def) != _header(new):
        return CheckResult(
            (
                f"{line}: {what} changes the def line (name, decorators, parameters, defaults or "
                "annotations); only its body may change without a person",
            )
        )
    if isinstance(new, ast.AsyncFunctionDef):
        return CheckResult((f"{line}: an async function cannot be changed without a person",))
    changes = list(statement_changes(old_def.body if old_def else [], new.body))
    changed = [header_only(statement) if header_changed else statement for statement, header_changed in changes]
    parameters = frozenset(
        a.arg
        for d in ast.walk(new)
        if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef))  # nested defs' too; lambdas' stay in them
        for a in ast.walk(d.args)
        if isinstance(a, ast.arg)
    )
    backwards = admitted_backwards(old_def, new) if "range" not in context.names else frozenset()
    checked = _verdict(changed, context, deletable=_stores(new.body), parameters=parameters,
                       first_lineno=context.first_lineno, backwards=backwards)
    run_by_headers = _run_by_changed_headers(changes, changed, context)
    aimed = _aimed(new, changed, context, context.first_lineno, "the change", skip=set(run_by_headers))
    discarded = discarded_updates(changed, context.first_lineno)
    return CheckResult(checked.reasons + tuple(run_by_headers.values()) + aimed + discarded)


def changed_lines(running: str, source: str) -> frozenset[int]:
    """The lines of `source` (a surgery's or a patch's new `def`, counted from its first line) that are
    the change's own code: its new and changed statements, whole when a compound statement's header
    changed (its body runs because of the header). Empty when either does not parse."""
    new, old = _one_def(source, "the change"), _one_def(running, "the running function")
    if isinstance(new, str) or isinstance(old, str):
        return frozenset()
    found: set[int] = set()
    for statement, _ in statement_changes(old.body, new.body):
        found.update(range(statement.lineno, (statement.end_lineno or statement.lineno) + 1))
    return frozenset(found)


def _one_def(source: str, what: str, first_lineno: int | None = None) -> ast.FunctionDef | ast.AsyncFunctionDef | str:
    tree = parse_code(source, what, first_lineno)
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
    statements: list[ast.stmt],
    context: Context,
    *,
    deletable: frozenset[str],
    parameters: frozenset[str],
    first_lineno: int | None,
    backwards: frozenset[int] = frozenset(),
) -> CheckResult:
    checker = Checker(context, statements, deletable, parameters, first_lineno, backwards)
    try:
        for statement in statements:
            checker.statement(statement)
    except RecursionError:
        checker.refuse(statements[0] if statements else None, "the code is nested too deeply to check")
    return CheckResult(tuple(dict.fromkeys(checker.reasons)))


def _run_by_changed_headers(
    changes: list[tuple[ast.stmt, bool]], changed: list[ast.stmt], context: Context
) -> dict[int, str]:
    """The program's statements reaching the system in the unchanged bodies of compound statements whose
    header changed, by their line: whether and how often they run is the change's doing (`if True:` over
    the program's `rmtree`), so they need a person."""
    reach = Reach(context.values, context.module, context.modules)
    inside = {id(node) for statement in changed for node in ast.walk(statement)}
    found: dict[int, str] = {}
    for statement, header_changed in changes:
        if not header_changed:
            continue
        for body in _bodies_of(statement):
            for node in ast.walk(body):
                if not isinstance(node, ast.Call) or id(node) in inside or node.lineno in found:
                    continue
                effect = reach.call(node)
                if effect is not None:
                    via = f" ({effect.through})" if effect.through else ""
                    line, header = context.first_lineno + node.lineno - 1, context.first_lineno + statement.lineno - 1
                    found[node.lineno] = (
                        f"line {line}: the program's own `{effect.what}`{via} reaches files, processes or the "
                        f"network, and it runs under the header the change makes at line {header}: whether it "
                        "runs is the change's doing, which needs a person"
                    )
    return found


def _aimed(
    function: ast.AST,
    repair: list[ast.stmt],
    context: Context,
    first_lineno: int,
    what: str,
    skip: set[int] | None = None,
) -> tuple[str, ...]:
    """Why the repair needs a person: the program's own statements reaching the system that the names
    it binds flow into (`daifu.decide.allowlist_flow`), in file lines; the lines in `skip` are said already."""
    reach = Reach(context.values, context.module, context.modules)
    own_data = _pointed_within_own_folder(repair, context)
    reasons = []
    for aimed in aimed_effects(function, repair, reach.call, context.methods, frozenset(context.modules)):
        if (skip and aimed.lineno in skip) or (aimed.reads and set(aimed.names) <= own_data):
            continue
        reasons.append(_effect_reason(
            first_lineno + aimed.lineno - 1, aimed.effect, aimed.through,
            f", and {what} changes what aims it ({_named(aimed.names)}): a repair that aims the program's effects "
            "needs a person",
        ))
    return tuple(dict.fromkeys(reasons))


def _pointed_within_own_folder(repair: list[ast.stmt], context: Context) -> set[str]:
    """The names the repair binds only to an existing file, written out (`'data/v2.pt'`,
    `pathlib.Path('data/v2.pt')`), in the folder of the path the name held at the crash: a read the
    program aims with them reads the program's own data, as before, only another file of it."""
    values: dict[str, list[ast.expr]] = {}
    plain: set[int] = set()
    for statement in repair:
        for node in ast.walk(statement):
            if isinstance(node, ast.Name) and id(node) in plain:
                continue  # the target of a plain assignment, seen with its value
            if isinstance(node, ast.Assign):
                plain.update(id(t) for t in node.targets if isinstance(t, ast.Name))
            for target, value in _plain_bindings(node):
                values.setdefault(target, []).append(value)
    return {name for name, bound in values.items() if all(_beside(_literal_path(v), context.values.get(name))
                                                          for v in bound)}


_NO_VALUE = ast.Constant(None)


def _plain_bindings(node: ast.AST) -> list[tuple[str, ast.expr]]:
    """(name, value) for each name `node` binds: the value of a plain `name = value`, `_NO_VALUE` for a
    name bound any other way (a tuple target, a loop, `+=`, an import)."""
    if isinstance(node, ast.Assign):
        found = []
        for target in node.targets:
            if isinstance(target, ast.Name):
                found.append((target.id, node.value))
            else:
                found += [(n.id, _NO_VALUE) for n in ast.walk(target) if isinstance(n, ast.Name)]
        return found
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
        return [(node.id, _NO_VALUE)]
    return []


def _literal_path(value: ast.expr) -> str | None:
    if isinstance(value, ast.Call) and len(value.args) == 1 and not value.keywords:
        func = value.func
        if (isinstance(func, ast.Name) and func.id == "Path") or (
            isinstance(func, ast.Attribute) and func.attr == "Path"
        ):
            value = value.args[0]
    return value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else None


def _beside(new: str | None, old: object) -> bool:
    """Whether the existing file `new` is in the same folder as the path `old` (both resolved)."""
    if new is None or not isinstance(old, (str, os.PathLike)):
        return False
    try:
        old_path = os.fspath(old)
        if not isinstance(old_path, str) or not os.path.isfile(new):
            return False
        return os.path.dirname(os.path.realpath(new)) == os.path.dirname(os.path.realpath(old_path))
    except (OSError, ValueError, TypeError):
        return False


# -- which statements of a surgery changed -----------------------------------------------------------

def changed_statements(old: list[ast.stmt], new: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of `new` that are not the same statements of `old` in the same place.

    A changed compound statement whose counterpart is found yields its header (its bodies emptied)
    when the header changed, then the changed statements of its bodies. What its unchanged bodies do
    is the change's doing all the same (`if True:` over the program's `rmtree`): `_check_def` judges
    what they reach (`_run_by_changed_headers`).
    """
    for statement, header_changed in statement_changes(old, new):
        yield header_only(statement) if header_changed else statement


def _bodies_of(node: ast.stmt) -> Iterator[ast.stmt]:
    for name in BODIES:
        yield from getattr(node, name, None) or []
    for handler in getattr(node, "handlers", None) or []:
        yield from handler.body


