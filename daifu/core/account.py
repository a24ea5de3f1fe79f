"""What a repair passes over: the work a decision leaves undone, counted each time it fires.

A repair that skips a statement, an iteration or rows of a batch keeps the run going at a price: the
samples it never trains on, the optimizer steps it never takes, the statements it never runs. One
iteration of a trial cannot see that price when it is paid again on every later batch, so the runtime
counts it where the decision fires, each time it fires:

- a decision carried out at a crash fires once per crash it repairs (`Vaccine._prepare`): `Skip` (the
  statement not run; a loop header's skip ends the loop), `SkipIteration` (the rest of the iteration; at
  a `for` header, the item that failed to load), a retry of a `for` header that cannot load the item
  that failed again (`daifu.core.refetch`: a batch a DataLoader loads again is not passed over), an
  action that rebinds a name to fewer rows;
- a surgery's changed statements carry *probes* (`find_probes`): a `continue`, `break` or `return` it
  introduced (or one that a changed `if` test leads to) fires each time it runs; a changed statement
  that rebinds a name to fewer rows than the name held drops them each time it runs. Only the new
  statements of a surgery carry one: code no surgery changed runs as before, at no cost.

A trial carries the decision out through the same runtime path, so the copy's `Account` counts what
the repair would give up in the copy, the same way.

Samples of an iteration: the first dimension of the batch the loop's target holds (its tensors and
arrays, a list of records, or the first one among the lists, tuples and dicts holding them), else of a local named
`batch`; else unknown, and said to be unknown, never guessed. The plan: the length of the loop (what
its iterator says it holds, `plan_of`), summed over the passes of the loop the repair fired in.
"""

from __future__ import annotations

import ast
import difflib
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from daifu.core.blocks import Path, child_blocks, node_at, path_of
from daifu.state import RUN

Site = tuple[str, str, int]
"""Function, file and line of the crash a repair answered (`Crash.site`): what its account is kept by."""

JUMPS = {ast.Continue: "continue", ast.Break: "break", ast.Return: "return"}
HOW = {"skip": "a skipped statement", "skip-iteration": "a skipped iteration", "skip-loop": "a loop ended early",
       "next-item": "an item the loop failed to load", "continue": "the `continue` it introduced",
       "break": "the `break` it introduced", "return": "the `return` it introduced",
       "rows": "rows a changed statement dropped", "skip-step": "a framework's step that passed over its batch"}
"""What each kind of firing (`Firing.how`) is, in words."""


@dataclass(frozen=True)
class Firing:
    """One time a repair passed over work.

    how: what passed it over (`skip`, `skip-iteration`, `next-item`, `continue`, `break`, `return`, `rows`,
        `skip-step`: a `SkipIteration` that ended a framework's step, `daifu.targets`).
    samples: the samples passed over; `None`: they cannot be told (said as unknown).
    steps: the iterations it passed over, in whole or in part.
    statements: the statements of the iteration it kept from running.
    optimizer_steps: the calls of a `.step()` method among those statements (an optimizer's, a scheduler's).
    plan: the length of the loop's pass it fired in, when its iterator tells; `loop`: that iterator
        (a new one is a new pass, whose length adds to the plan).
    held: for `rows`, the rows the batch held before they were dropped (the batch's size), when told.
    remaining: the items the loop's pass had left after the one it fired in, when its iterator tells
        (0: the last batch of a pass).
    why: for `next-item` passed over by a retry, why the item the loop failed to load could not be
        loaded again (`daifu.core.refetch`): the terminal and the record say it.
    """

    how: str
    samples: int | None
    steps: int = 1
    statements: int = 0
    optimizer_steps: int = 0
    plan: int | None = None
    loop: Any = field(default=None, compare=False, repr=False)
    held: int | None = None
    remaining: int | None = None
    why: str | None = None

    @property
    def what(self) -> str:
        """What passed the work over, in words: `the `continue` it introduced`."""
        return HOW.get(self.how, self.how)

    def to_data(self) -> dict[str, Any]:
        return {"how": self.how, "samples": self.samples, "steps": self.steps, "statements": self.statements,
                "optimizer_steps": self.optimizer_steps, "plan": self.plan, **({"why": self.why} if self.why else {})}


@dataclass(frozen=True)
class Budget:
    """How much the automatic repairs of a site may pass over before they stop (`daifu.decide.watch`).

    samples: at most this many samples in all; a firing whose samples cannot be told is allowed once
    (it cannot be weighed). firings: at most this many firings (`None`: any number). text: what a
    person reads. The default budget is the crashed batch's own samples, once: `Budget(n, 1)`.
    """

    samples: int | None
    firings: int | None
    text: str

    def exceeded_by(self, account: Account, firing: Firing) -> bool:
        """Whether `firing`, added to `account`, would pass the budget.

        Rows dropped from a batch (`rows`) are weighed by their number only, never by how many batches
        they came from: a few bad rows left out of two batches give up less than the one batch the budget
        allows. Their limit is the budget's samples, else the size of the batch they were dropped from;
        only passing over whole statements or iterations counts against `firings`. The budget holds once
        per pass over the data: passing over the same training batch place of a new pass of the loop as
        its first firing did (the last batch of each epoch, too small for a layer) is the crashed batch
        again (`recurs`)."""
        if firing.how == "rows" and firing.samples is not None:
            limit = self.samples if self.samples is not None else firing.held
            if limit is not None:
                return account.samples + firing.samples > limit
        if account.recurs(firing):
            return False
        if self.firings is not None and account.firings - account.row_firings + 1 > self.firings:
            return True
        if self.samples is None:
            return False
        if firing.samples is None:
            return account.unknown + 1 > 1
        return account.samples + firing.samples > self.samples


@dataclass
class Account:
    """What the repairs of one site passed over in this run, summed over every firing.

    repairs: the numbers of the repairs made at the site (each crash repaired is one).
    row_firings: the firings that dropped a known number of rows from a batch (weighed by rows only).
    position: where in its pass of the loop the first firing that passed over iterations was (the items
    left after it), when told: a later pass over the same place is the same batch again (`recurs`).
    unknown: the firings whose samples could not be told. plan: the summed lengths of the loop's passes
    it fired in (`None`: no pass told its length). budget: set by the watch of an automatic repair.
    """

    site: Site
    where: str
    repairs: list[int] = field(default_factory=list)
    firings: int = 0
    row_firings: int = 0
    samples: int = 0
    unknown: int = 0
    steps: int = 0
    statements: int = 0
    optimizer_steps: int = 0
    plan: int | None = None
    budget: Budget | None = None
    position: int | None = None
    _loop: Any = field(default=None, repr=False)

    def recurs(self, firing: Firing) -> bool:
        """Whether `firing` passes over the same place of a new pass of the loop as the site's first firing
        that passed over iterations did (both told by their iterators, `Firing.remaining`), and over a
        training batch there: an optimizer's step among what it kept from running. Passing over the same
        place of a pass that trains nothing (a sample drawn per setting, an evaluation, a log) is not the
        crashed batch again but the same output lost at every pass: the budget counts it."""
        return (firing.how != "rows" and firing.optimizer_steps > 0 and firing.remaining is not None
                and firing.remaining == self.position and firing.loop is not None
                and firing.loop is not self._loop)

    def add(self, firing: Firing) -> None:
        """Count one firing. A pass of the loop not seen before adds its length to the plan; the
        iterator is held so that its id names that pass only."""
        if firing.how != "rows" and self.firings == self.row_firings:
            self.position = firing.remaining
        self.firings += 1
        self.row_firings += firing.how == "rows" and firing.samples is not None
        self.steps += firing.steps
        self.statements += firing.statements
        self.optimizer_steps += firing.optimizer_steps
        if firing.samples is None:
            self.unknown += 1
        else:
            self.samples += firing.samples
        if firing.loop is not None and firing.loop is not self._loop:
            self._loop = firing.loop
            if firing.plan is not None:
                self.plan = (self.plan or 0) + firing.plan

    def describe(self) -> str:
        """`passed over 64 samples in 2 steps (5% of the plan: 40 iterations)`, and the statements not run."""
        if self.unknown == 0:
            samples = f"{self.samples} sample{_s(self.samples)}"
        elif self.samples == 0:
            samples = "an unknown number of samples"
        else:
            samples = f"{self.samples} samples and an unknown number more"
        text = f"passed over {samples} in {self.steps} step{_s(self.steps)}"
        if self.plan:
            text += f" ({100 * self.steps / self.plan:.3g}% of the plan: {self.plan} iterations)"
        if self.statements:
            text += f", {self.statements} statement{_s(self.statements)} not run"
        if self.optimizer_steps:
            text += f" ({self.optimizer_steps} `.step()` call{_s(self.optimizer_steps)})"
        return text

    def to_data(self) -> dict[str, Any]:
        return {"firings": self.firings, "samples": self.samples, "unknown_samples": self.unknown,
                "steps": self.steps, "statements": self.statements, "optimizer_steps": self.optimizer_steps,
                "plan": self.plan, "repairs": list(self.repairs), "text": self.describe(),
                "budget": self.budget.text if self.budget is not None else None}


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def account_of(site: Site, where: str) -> Account:
    """The account of `site` in this run (`RUN.accounts`), opened at its first firing."""
    found = RUN.accounts.get(site)
    if found is None:
        found = RUN.accounts[site] = Account(site, where)
    return found  # type: ignore[no-any-return]


# -- what an iteration holds ------------------------------------------------------------------


def rows(value: Any) -> int | None:
    """The first dimension of a tensor or array (`shape[0]`), the length of a list of records, of the first
    such value in a list, tuple or dict, or the length of a list of plain values; `None` when `value` has
    no rows."""
    shape = getattr(value, "shape", None)
    if shape is not None and not isinstance(value, type):
        try:
            return int(shape[0]) if len(shape) else None
        except (TypeError, IndexError, ValueError):
            return None
    if isinstance(value, Mapping):
        return _first_rows(value.values())
    listed = records(value)
    if listed is not None:
        return listed
    if isinstance(value, (list, tuple)):
        inner = _first_rows(value)
        return inner if inner is not None or isinstance(value, tuple) else len(value)
    return None


def records(value: Any) -> int | None:
    """The length of a list of records — dicts, one per sample, as a JSON-lines export or a dataset of
    dicts gives them — whose own fields are not its rows; `None` for anything else."""
    if type(value) is list and value and isinstance(value[0], Mapping):
        return len(value)
    return None


def _first_rows(values: Iterable[Any]) -> int | None:
    for value in itertools.islice(values, 16):
        if getattr(value, "shape", None) is not None or isinstance(value, (list, tuple, Mapping)):
            found = rows(value)
            if found is not None:
                return found
    return None


def size(value: Any) -> int | None:
    """How many elements a tensor or array holds (`numel`, `size`); `None` for anything else."""
    numel = getattr(value, "numel", None)
    if callable(numel):
        try:
            return int(numel())
        except Exception:
            return None
    count = getattr(value, "size", None)
    return count if isinstance(count, int) else None


def loop_around(fdef: ast.FunctionDef, path: Path) -> tuple[ast.For | ast.While, int] | None:
    """The innermost loop whose body holds the statement at `path`, and how many `for` loops hold
    that loop (the depth `D` of its `@itD`); `None` outside loops."""
    found: tuple[ast.For | ast.While, int] | None = None
    fors = 0
    for end in range(1, len(path) - 1, 2):
        node = node_at(fdef, path[:end])
        if isinstance(node, (ast.For, ast.While)) and path[end] == "body":
            found = (node, fors)
        fors += isinstance(node, ast.For)
    return found


def crashed_batch(source: str, first_lineno: int, lineno: int, namespace: Mapping[str, Any]) -> int | None:
    """The samples of the batch a crash at file line `lineno` of the function `source` met (its
    locals `namespace`): those of the innermost loop's target there (`batch_samples`)."""
    from daifu.core.blocks import annotate, locate
    from daifu.core.source import parse_function

    try:
        fdef = parse_function(source, first_lineno)
    except SyntaxError:
        return None
    annotate(fdef)
    found = locate(fdef.body, lineno, None)
    around = loop_around(fdef, path_of(found[0])) if found is not None else None
    return batch_samples(namespace, around[0] if around is not None else None)


def batch_samples(namespace: Mapping[str, Any], loop: ast.For | ast.While | None) -> int | None:
    """The samples of the iteration a frame is in: the rows of what the loop's target binds, else
    of its local `batch`; `None` when neither tells."""
    names = [node.id for node in ast.walk(loop.target) if isinstance(node, ast.Name)] \
        if isinstance(loop, ast.For) else []
    for name in names + ["batch"]:
        if name in namespace:
            found = rows(namespace[name])
            if found is not None:
                return found
    return None


def plan_of(iterator: Any) -> int | None:
    """How many items the loop's pass holds in all, when its iterator tells: its `len()` (a
    DataLoader's), or for the standard library's iterators the sequence they walk, read from how
    they pickle (`range`, a list, `enumerate`, `zip`: the shortest of what they walk)."""
    if iterator is None:
        return None
    if type(iterator).__module__ not in ("builtins", "itertools"):
        try:
            return int(len(iterator))
        except Exception:  # an iterator without a length, or whose length fails: no plan
            return None
    if isinstance(iterator, (list, tuple, range, dict)):
        return len(iterator)
    try:
        reduced = iterator.__reduce__()
    except Exception:
        return None
    arguments = reduced[1] if isinstance(reduced, tuple) and len(reduced) > 1 else ()
    plans = [plan_of(argument) for argument in arguments if not isinstance(argument, (int, str, bytes))
             and (hasattr(argument, "__iter__") or hasattr(argument, "__next__"))]
    known = [plan for plan in plans if plan is not None]
    return min(known) if known and len(known) == len(plans) else None


def rest_of_iteration(fdef: ast.FunctionDef, path: Path, including: bool = True) -> list[ast.stmt]:
    """The statements of the innermost loop's iteration from the statement at `path` on (without it
    unless `including`): the rest of its block, then of every block around it up to the loop's body."""
    statements: list[ast.stmt] = []
    end = len(path)
    first = path[-1] if including else path[-1] + 1
    while end >= 1:
        block = fdef.body if end == 1 else _block(fdef, path[: end - 1])
        statements += block[first:]
        if end == 1:
            break
        holder = node_at(fdef, path[: end - 2])
        if isinstance(holder, (ast.For, ast.While)) and path[end - 2] == "body":
            break
        end -= 2
        first = path[end - 1] + 1
    return statements


def _block(fdef: ast.FunctionDef, prefix: Path) -> list[ast.stmt]:
    holder = node_at(fdef, prefix[:-1])
    return next(block for name, block in child_blocks(holder) if name == prefix[-1])


def work_of(statements: list[ast.stmt]) -> tuple[int, int]:
    """How many statements (nested ones counted) and calls of a `.step()` method `statements` hold."""
    count = steps = 0
    for statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, ast.stmt):
                count += 1
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "step":
                steps += 1
    return count, steps


def iteration_firing(how: str, fdef: ast.FunctionDef, path: Path, namespace: Mapping[str, Any],
                     including: bool = True) -> Firing | None:
    """The firing of a decision that leaves the rest of the innermost loop's iteration from `path` on
    (`SkipIteration`, a jump, a skipped statement that ends it); `None` outside loops."""
    around = loop_around(fdef, path)
    if around is None:
        return None
    loop, depth = around
    statements, steps = work_of(rest_of_iteration(fdef, path, including))
    iterator = namespace.get(f"@it{depth}") if isinstance(loop, ast.For) else None
    return Firing(how, batch_samples(namespace, loop), 1, statements, steps, plan_of(iterator), iterator,
                  remaining=_remaining(iterator))


def dropped_rows(before: Mapping[str, Any], after: Mapping[str, Any]) -> int:
    """The rows the rebinding of the names of `before` (their values then) to those of `after` dropped:
    a name now holding fewer rows and fewer elements than it held (a reshape drops nothing), the most
    of any name (`x, y = x[keep], y[keep]` drops the same rows twice)."""
    dropped = 0
    for name, old in before.items():
        if name not in after or after[name] is old:
            continue
        old_rows, new_rows = rows(old), rows(after[name])
        if old_rows is None or new_rows is None or new_rows >= old_rows:
            continue
        old_size, new_size = size(old), size(after[name])
        if old_size is not None and new_size is not None and new_size >= old_size:
            continue
        dropped = max(dropped, old_rows - new_rows)
    return dropped


def held_rows(before: Mapping[str, Any]) -> int | None:
    """The most rows any of the values of `before` held: the batch's size before rows were dropped."""
    found = [count for value in before.values() if (count := rows(value)) is not None]
    return max(found) if found else None


def dropped_by_rebinding(before: Mapping[str, Any], namespace: Mapping[str, Any], fdef: ast.FunctionDef,
                         path: Path) -> int:
    """The rows a changed statement at `path` dropped by rebinding the names of `before` (`dropped_rows`),
    less those it made to match the iteration's batch: a name rebound to exactly as many rows as the batch
    held before the statement (a tensor sized from the data instead of a configured batch size) drops
    none of the data."""
    around = loop_around(fdef, path)
    samples = batch_samples({**namespace, **before}, around[0]) if around is not None else None
    if samples is None:
        return dropped_rows(before, namespace)
    matching = {name for name in before if name in namespace and rows(namespace[name]) == samples}
    return dropped_rows({name: old for name, old in before.items() if name not in matching}, namespace)


# -- probes: a surgery's new statements, counted each time they run -----------------------------


@dataclass(frozen=True)
class Probe:
    """A statement of a surgery's version counted each time it runs (`Rewriter` emits the calls).

    how: `continue`, `break` or `return` (counted before the jump), or `rows` (a changed statement
    rebinding `names`: counted after it, against what the names held before). site, where: the account
    it counts in: the repair that introduced it. surgery, undo: the source of the version it was made
    for and of the version that surgery changed, to which the run goes back when the budget stops
    the repair (`Vaccine.fired`).
    """

    number: int
    how: str
    site: Site
    where: str
    names: tuple[str, ...] = ()
    surgery: str = ""
    undo: str = ""


_probes: list[Probe] = []
"""Every probe of this process, by number: the generated code names its probe by a number."""


def probe(number: int) -> Probe:
    return _probes[number]


def _new_probe(how: str, site: Site, where: str, names: tuple[str, ...], surgery: str, undo: str) -> Probe:
    made = Probe(len(_probes), how, site, where, names, surgery, undo)
    _probes.append(made)
    return made


def find_probes(old_fdef: ast.FunctionDef, old_lines: list[str], old_probes: Mapping[int, Probe],
                new_fdef: ast.FunctionDef, new_lines: list[str], first_lineno: int,
                site: Site, where: str, surgery: str, undo: str) -> dict[int, Probe]:
    """The probes of a surgery's new version (by `id` of the statement in `new_fdef`): its jumps and
    rebindings from themselves on lines the surgery changed (a jump inside an `if` whose test changed too), and the
    probes of the old version on lines it kept. Only statements inside a loop carry one."""
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    kept: dict[int, int] = {}  # new file line -> old file line, for the lines the surgery kept
    for tag, old_start, old_end, new_start, new_end in matcher.get_opcodes():
        if tag == "equal":
            for offset in range(old_end - old_start):
                kept[first_lineno + new_start + offset] = first_lineno + old_start + offset
    # the old version's probes by place; the function as written has none, and its tree is not walked for them
    inherited = {_line_key(node): found for node in _statements(old_fdef)
                 if (found := old_probes.get(id(node))) is not None} if old_probes else {}
    probes: dict[int, Probe] = {}
    for node, changed_test in _in_loops(new_fdef, kept):
        old_line = kept.get(node.lineno)
        if old_line is not None and not changed_test:
            found = inherited.get((type(node), old_line, node.col_offset))
            if found is not None:
                probes[id(node)] = found
            continue
        how = JUMPS.get(type(node))
        if how is not None:
            probes[id(node)] = _new_probe(how, site, where, (), surgery, undo)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and old_line is None:
            # only a name rebound from itself (`x, y = x[keep], y[keep]`) can lose rows: one bound from
            # other values (a chunk, a micro-batch, the next episode's) drops none of what it held
            read = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
            names = tuple(sorted({n.id for n in ast.walk(node) if isinstance(n, ast.Name)
                                  and isinstance(n.ctx, ast.Store)} & read))
            if names:
                probes[id(node)] = _new_probe("rows", site, where, names, surgery, undo)
    return probes


def _line_key(node: ast.stmt) -> tuple[type, int, int]:
    return type(node), node.lineno, node.col_offset


def _statements(fdef: ast.FunctionDef) -> list[ast.stmt]:
    found: list[ast.stmt] = []
    todo = list(fdef.body)
    while todo:
        node = todo.pop()
        found.append(node)
        for _field, block in child_blocks(node):
            todo.extend(block)
    return found


def _in_loops(fdef: ast.FunctionDef, kept: Mapping[int, int]) -> Iterable[tuple[ast.stmt, bool]]:
    """The simple statements inside a loop of the function (not of nested scopes), each with whether
    an `if` around it inside the loop has a test on a changed line."""

    def walk(block: list[ast.stmt], in_loop: bool, changed_test: bool) -> Iterable[tuple[ast.stmt, bool]]:
        for node in block:
            if not child_blocks(node):
                if in_loop:
                    yield node, changed_test
                continue
            inner_loop = in_loop or isinstance(node, (ast.For, ast.While))
            test_changed = changed_test or (isinstance(node, ast.If) and in_loop and node.lineno not in kept)
            if isinstance(node, (ast.For, ast.While)):
                test_changed = False  # a jump inside a loop of its own leaves that loop
            for _field, inner in child_blocks(node):
                yield from walk(inner, inner_loop, test_changed)

    yield from walk(fdef.body, False, False)


def probe_firing(found: Probe, fdef: ast.FunctionDef, path: Path, namespace: Mapping[str, Any],
                 dropped: int = 0, held: int | None = None) -> Firing | None:
    """The firing of probe `found` at the statement at `path` of `fdef`, in a frame whose locals are
    `namespace`; for a `rows` probe, `dropped`: the rows it dropped (none: no firing), of the `held` the
    batch had."""
    if found.how == "rows":
        if dropped <= 0:
            return None
        around = loop_around(fdef, path)
        iterator = namespace.get(f"@it{around[1]}") if around and isinstance(around[0], ast.For) else None
        return Firing("rows", dropped, 1, 0, 0, plan_of(iterator), iterator, held)
    firing = iteration_firing(found.how, fdef, path, namespace, including=False)
    if firing is None or found.how == "continue":
        return firing
    around = loop_around(fdef, path)  # a `break` or `return` leaves the rest of the loop too
    remaining = _remaining(namespace.get(f"@it{around[1]}")) if around and isinstance(around[0], ast.For) else None
    if remaining is None:
        return Firing(firing.how, None, firing.steps, firing.statements, firing.optimizer_steps, firing.plan,
                      firing.loop)
    samples = firing.samples if remaining == 0 else None
    return Firing(firing.how, samples, 1 + remaining, firing.statements, firing.optimizer_steps, firing.plan,
                  firing.loop)


def _remaining(iterator: Any) -> int | None:
    """How many items the loop's iterator has left: a standard library iterator's `__length_hint__`; a
    DataLoader's iterator's batches less those it has yielded (its own count, `_num_yielded`: its hint is
    its whole length); `None` for any other (a generator tells neither)."""
    if iterator is not None and type(iterator).__module__ == "torch.utils.data.dataloader":
        return _loader_remaining(iterator)
    if iterator is None or type(iterator).__module__ not in ("builtins", "itertools"):
        return None
    try:
        hint = iterator.__length_hint__()
    except Exception:
        return None
    return hint if isinstance(hint, int) and hint >= 0 else None


def _loader_remaining(iterator: Any) -> int | None:
    """The batches a DataLoader's iterator has left in its pass, read from its own storage (its count of
    batches yielded) and its length; `None` where either is missing (an iterable dataset without one)."""
    try:
        yielded = object.__getattribute__(iterator, "__dict__").get("_num_yielded")
        total = len(iterator)
    except Exception:  # no length: where in the pass cannot be told
        return None
    if type(yielded) is not int or not 0 <= yielded <= total:
        return None
    return total - yielded
