"""Where the names a repair binds flow: into the program's own statements that reach the system?

A repair that computes differently is admissible; one that aims the program's own effects needs a
person, however plain its own code: `stale_files = [victim]` before the program's
`for f in stale_files: os.remove(f)`, `checkpoint = '/elsewhere'` before its
`torch.save(model.state_dict(), checkpoint)`, a changed `for` header whose variable the program deletes.

`aimed_effects` follows definitions to uses through the function the repair runs in (a surgery's new
version, or the crashed function around an action):

- the repair binds a name when it assigns it (plainly, augmented, as a loop, `with` or `except`
  target, by an import), assigns an attribute or item of it (`cfg.out = ...`), or calls a method on it
  that may change it (`stale_files.append(...)`);
- a name is bound in turn by any statement of the function that binds it from an expression reading
  a bound name, whatever the order of the statements (a loop brings later lines before earlier ones;
  a name rebound in between is still counted: the analysis may over-report, never under-report);
- a statement of the program outside the repair whose call reaches the system
  (`daifu.decide.allowlist_reach`) is aimed by the repair when its aiming expressions — a file's path,
  a command, a logger — read a bound name, or, for an effect that is harm by running at all (a
  deletion, a process, a connection; not a read, a write of a file or a log), when whether it runs
  does: it sits under an `if`, a `while`, a conditional expression or a short-circuit whose
  condition reads one.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from daifu.decide.allowlist_system import CONTENT_METHODS, LOG_METHODS, READ_METHODS
from daifu.decide.allowlist_tables import CONTAINER_METHODS, METHODS, STRING_RESULTS


@dataclass(frozen=True)
class Effect:
    """A call that reaches the system (`daifu.decide.allowlist_reach`): what it is, the expressions that
    aim it, and the way it gets there."""

    what: str
    targets: tuple[ast.expr, ...]
    through: str = ""
    reads: bool = False
    """It only reads a file (`torch.load(path)`, `open(path)`): aimed elsewhere, it reads other data."""
    severe: bool = False
    """It deletes, renames, changes modes, runs a process, connects, or reaches the system some other way
    than reading or writing a file or logging: whether it runs at all is then the harm."""


EffectOf = Callable[[ast.Call], "Effect | None"]
"""What a call reaches of the system, if anything (`Reach.call`)."""


@dataclass(frozen=True)
class Aimed:
    """A statement of the program the repair aims: its line (in the checked source) and what reaches it."""

    lineno: int
    effect: str
    names: tuple[str, ...]
    through: str = ""
    reads: bool = False
    """The effect only reads a file, and only by what it reads is it aimed (not by whether it runs)."""


def aimed_effects(
    function: ast.AST,
    repair: list[ast.stmt],
    effect_of: EffectOf,
    pure_methods: frozenset[str],
    modules: frozenset[str],
    given: frozenset[str] = frozenset(),
) -> list[Aimed]:
    """The program's statements in `function` reaching the system whose aim reads a name `repair` binds
    (or one of `given`: a function's parameter, to tell whether it aims what the function reaches).
    `modules` are the names bound to modules: calling a module's function changes no name."""
    inside = {id(node) for statement in repair for node in ast.walk(statement)}
    bound = (_bound_by(repair, pure_methods) | given) - modules
    bound = _closure(bound, function, pure_methods) - modules
    controlled = _controlled(function, bound)
    found: list[Aimed] = []
    for node, read in _calls(function):
        if id(node) in inside or (id(node) not in controlled and not read & bound):
            continue  # what aims a call is part of it (its receiver, its arguments): none of it reads a bound name
        effect = effect_of(node)
        if effect is None:
            continue
        aiming = {name for target in effect.targets for name in _reads(target)} & bound
        running = controlled.get(id(node), set()) if effect.severe else set()
        if aiming | running:
            reads = effect.reads and not running
            found.append(Aimed(node.lineno, effect.what, tuple(sorted(aiming | running)), effect.through, reads))
    return found


def decided_effects(
    function: ast.AST,
    names: frozenset[str],
    effect_of: EffectOf,
    pure_methods: frozenset[str],
    modules: frozenset[str],
) -> list[Aimed]:
    """The program's statements in `function` reaching the system, of any kind (a write too), whose running
    depends on `names` or what is made from them: the module-level settings an action rebinds. A changed
    condition in a surgery needs a person whatever its body reaches (`allowlist._run_by_changed_headers`);
    rebinding the setting the condition reads (`MONITOR = 'loss'` before `if metrics[MONITOR] > best:
    torch.save(...)`) changes the same decision and is held to the same rule."""
    bound = _closure(set(names), function, pure_methods) - modules
    controlled = _controlled(function, bound)
    found: list[Aimed] = []
    for node, _ in _calls(function):
        if id(node) in controlled:
            effect = effect_of(node)
            if effect is not None:
                found.append(Aimed(node.lineno, effect.what, tuple(sorted(controlled[id(node)])), effect.through))
    return found


def _controlled(function: ast.AST, bound: set[str]) -> dict[int, set[str]]:
    """The calls whose running depends on a bound name (under an `if`, a `while`, `x if c else y`, `a and
    b` or a comprehension's `if` whose condition reads one), by id, with the names it reads: `cleanup =
    True` before the program's `if cleanup: shutil.rmtree(...)` aims the removal as surely as a path
    would. A `for` over a bound name runs its body over other items, not other effects: what those
    items are is followed as data (its target is bound)."""
    found: dict[int, set[str]] = {}
    for read, calls in _governed(function):
        names = read & bound
        if names:
            for call in calls:
                found.setdefault(call, set()).update(names)
    return found


@functools.lru_cache(maxsize=32)
def _governed(function: ast.AST) -> tuple[tuple[frozenset[str], tuple[int, ...]], ...]:
    """For each condition in `function` (`_conditions`), the names it reads and the ids of the calls whose
    running it decides. What the tree alone says, kept per tree (the tree is held with it, so its ids
    stay its nodes'): every check of a repair at the same running version reads it again."""
    found = []
    for node in ast.walk(function):
        for condition, governed in _conditions(node):
            calls = tuple(id(call) for part in governed for call in ast.walk(part) if isinstance(call, ast.Call))
            found.append((frozenset(_reads(condition)), calls))
    return tuple(found)


@functools.lru_cache(maxsize=32)
def _calls(function: ast.AST) -> tuple[tuple[ast.Call, frozenset[str]], ...]:
    """The calls in `function`, in `ast.walk` order, each with every name read anywhere in it (its callee,
    receiver and arguments); kept per tree (`_governed`)."""
    return tuple((node, frozenset(_reads(node))) for node in ast.walk(function) if isinstance(node, ast.Call))


def _conditions(node: ast.AST) -> Iterator[tuple[ast.AST, list[ast.AST]]]:
    """(condition, what runs depending on it) for each way `node` decides what runs."""
    if isinstance(node, (ast.If, ast.While)):
        yield node.test, [*node.body, *node.orelse]
    elif isinstance(node, ast.IfExp):
        yield node.test, [node.body, node.orelse]
    elif isinstance(node, ast.BoolOp):
        for index in range(1, len(node.values)):
            yield ast.Tuple(elts=node.values[:index], ctx=ast.Load()), [node.values[index]]
    elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
        parts: list[ast.AST] = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        for generator in node.generators:
            yield ast.Tuple(elts=list(generator.ifs), ctx=ast.Load()), parts


def _bound_by(statements: list[ast.stmt], pure_methods: frozenset[str]) -> set[str]:
    found: set[str] = set()
    for statement in statements:
        for node in ast.walk(statement):
            found |= _binds(node, pure_methods)
    return found


def _binds(node: ast.AST, pure_methods: frozenset[str]) -> set[str]:
    """The names `node` binds or may change, by itself (not counting what its values read)."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
        return {node.id}
    if isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, (ast.Store, ast.Del)):
        root = _root(node)
        return {root} if root else set()
    if isinstance(node, ast.ExceptHandler) and node.name:
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if not _may_change(node.func.attr, pure_methods):
            return set()
        root = _root(node.func.value)
        return {root} if root else set()
    return set()


def _may_change(method: str, pure_methods: frozenset[str]) -> bool:
    """Whether calling `.method()` may change its receiver: a container's change, an in-place tensor
    method (`add_`), or any method not known to compute only (a str's are), but writing to a file,
    a socket or a logger."""
    if method in CONTAINER_METHODS or method.endswith("_"):
        return True
    if method in CONTENT_METHODS or method in LOG_METHODS or method in READ_METHODS:
        return False  # what a file, socket or logger is given or gives; where it points stays
    return method not in METHODS and method not in pure_methods and method not in STRING_RESULTS


def _closure(bound: set[str], function: ast.AST, pure_methods: frozenset[str]) -> set[str]:
    """`bound`, with every name bound from an expression that reads one of them, to a fixed point."""
    flows = _flows_of(function, pure_methods)
    found = set(bound)
    changed = True
    while changed:
        changed = False
        for targets, sources in flows:
            if sources & found and not targets <= found:
                found |= targets
                changed = True
    return found


@functools.lru_cache(maxsize=32)
def _flows_of(function: ast.AST, pure_methods: frozenset[str]) -> tuple[tuple[frozenset[str], frozenset[str]], ...]:
    """`_flows` of `function`, kept per tree and table of pure methods (`_governed`)."""
    return tuple((frozenset(targets), frozenset(sources)) for targets, sources in _flows(function, pure_methods))


def _flows(function: ast.AST, pure_methods: frozenset[str]) -> Iterator[tuple[set[str], set[str]]]:
    """(names bound, names read to bind them) for each binding in `function`."""
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            yield _targets(node.targets), _reads(node.value)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            yield _targets([node.target]), _reads(node.value) | _reads(node.target)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            yield _targets([node.target]), _reads(node.iter)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            yield _targets([node.optional_vars]), _reads(node.context_expr)
        elif isinstance(node, ast.NamedExpr):
            yield _targets([node.target]), _reads(node.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if _may_change(node.func.attr, pure_methods):
                root = _root(node.func.value)
                arguments = set().union(*(_reads(a) for a in [*node.args, *(k.value for k in node.keywords)]))
                if root:
                    yield {root}, arguments


def _targets(targets: list[ast.expr]) -> set[str]:
    found: set[str] = set()
    for target in targets:
        for node in ast.walk(target):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                found.add(node.id)
        if isinstance(target, (ast.Attribute, ast.Subscript)):
            root = _root(target)
            if root:
                found.add(root)
    return found


def _reads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None
