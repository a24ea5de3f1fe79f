"""The runtime of a vaccinated function: where a crash is intercepted and where the run resumes.

`Vaccine.crash` is called by the generated catchers, inside the frame that crashed. It finds the
faulty statement, asks for a decision and either returns (the catcher then re-raises the
original exception untouched) or raises a `Handover` carrying a continuation and a snapshot of
the frame's locals. The frame unwinds without running the user's `finally` clauses or `with`
exits, and its own generated code then runs the continuation — and any further continuations,
one after the other, so the stack does not grow with each crash.

The runtime knows nothing of who decides or where repairs are recorded: the layers above give it a
`Handling` (`daifu.core.handling`; `daifu.vaccinate` gives one). It can also try a decision without
carrying it out: in a sandboxed copy of the process (`daifu.core.trial`), through the very same
resume path.

Under the prototype's scope model (`transform(globals())`, `daifu.core.seedscope`) the function
vaccinated here is the *body* behind the user's function: its variables are module globals, which
a crash shows, and a repair edits, as its locals; an action then runs as the prototype ran it, in
the module's namespace.
"""

from __future__ import annotations

import ast
import gc
import os
from collections import ChainMap
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from types import CellType, CodeType, FrameType, FunctionType, MappingProxyType
from typing import TYPE_CHECKING, Any

from daifu.core import step_horizon, steps
from daifu.core.blocks import Path, locate, node_at, path_of, with_depth
from daifu.core.compiling import future_flags, make_function, qualified, register_source
from daifu.core.guard import Handover, is_passed, mark_passed
from daifu.core.step_horizon import StepReturned
from daifu.core.handling import Handling, RepairContext, RepairEntry
from daifu.core.helpers import Helpers
from daifu.core.iterators import finished_generator
from daifu.core.locate import column, raising_instruction
from daifu.core.names import bound_names
from daifu.core.rewrite import CannotResume, Flavour, Mode
from daifu.core.version import Version, build_version

# What only a crash needs (decisions, actions, surgeries, patches, trials) is imported where it is
# used: a program that never crashes never loads it, and `import daifu` + vaccinating stays light.
if TYPE_CHECKING:
    from daifu.core.account import Account, Firing
    from daifu.core.actions import Undo
    from daifu.core.crash import Crash
    from daifu.core.decisions import Decision
    from daifu.core.refetch import Reload
    from daifu.core.seedscope import SeedScope
    from daifu.core.surgery import SurgeryPlan
    from daifu.core.trial import Verdict


class RepairRefused(Exception):
    """A decision that cannot be carried out; the crash is offered again, state untouched."""


@dataclass(frozen=True)
class Site:
    """The faulty statement of a crash: its version, path, and whether its header raised."""

    version: Version
    path: Path
    header: bool
    node: Any = field(init=False, repr=False, compare=False)
    """The statement itself, found once: a crash asks for it several times."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "node", node_at(self.version.fdef, self.path))


@dataclass
class _Progress:
    """The last repair at a site: the locals it resumed with, its attempt number, what was tried."""

    fingerprint: dict[str, int]
    attempt: int
    tried: Sequence[tuple[str, str]]


class _Invocation:
    """One call of the vaccinated function, carried from continuation to continuation as `@call`.

    It holds the repair count of each site, so a new call starts afresh.
    """

    __slots__ = ("progress",)

    def __init__(self) -> None:
        self.progress: dict[Path, _Progress] = {}


@dataclass
class _Live:
    """What a decision is carried out on: the crash's site, its locals snapshot and its cells.

    shared: under the prototype's scope model, the function's module-global variables as the crash
    found them (also in `namespace`, where a repair may change them).
    """

    site: Site
    namespace: dict[str, Any]
    cells: dict[str, CellType]
    shared: dict[str, Any] = field(default_factory=dict)

    def copy(self) -> _Live:
        """A copy to carry a decision out on: a refused one leaves this one as it was."""
        return _Live(self.site, dict(self.namespace), self.cells, self.shared)


@dataclass(frozen=True)
class _Trying:
    """In a trial's copy, the decision tried: the crash it was tried for, its site, and where the run
    resumed after it (in a surgery's new version)."""

    decision: Decision
    crash: Crash
    site: Site
    resumed: Site


def _encloses(loop: Path, path: Path) -> bool:
    """Whether the loop statement at `loop` holds the statement at `path` in its body."""
    return len(path) > len(loop) + 1 and path[: len(loop)] == loop and path[len(loop)] == "body"


def _user_view(namespace: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in namespace.items() if not name.startswith("@")}


_TEMPORARIES = ("@e", "@en", "@h", "@k", "@ns", "@once", "@pending", "@rows", "@rv")


def _snapshot(frame: FrameType, cells: Any) -> tuple[dict[str, Any], dict[str, CellType]]:
    """What a catcher or a switch in `frame` hands on: its locals but the generated temporaries, and
    its cells by name (from `cells`, the lambda over them that the generated call passes)."""
    namespace = {k: v for k, v in dict(frame.f_locals).items() if k not in _TEMPORARIES}
    closure = dict(zip(cells.__code__.co_freevars, cells.__closure__ or ())) if cells else {}
    return namespace, closure


class Vaccine:
    """Everything DaiFu keeps about one vaccinated function.

    function: the user's function object, whose code is replaced in place by each version's
        vaccinated code (every decorator wrapper holding it runs the new code).
    versions: every source the function has had; the last one runs on later calls.
    units: which version each compiled code object (fast path or continuation) belongs to, by id;
        every such code object is kept alive by its version or the continuation cache.
    seed: under the prototype's scope model, the scope of the user's function, whose body
        `function` is; `None` for DaiFu's own model (ordinary locals).
    """

    def __init__(
        self, function: FunctionType, source: str, first_lineno: int, handling: Handling, seed: SeedScope | None = None
    ) -> None:
        code = function.__code__
        self.seed = seed
        self.function = function
        self.original_code = code
        self.handling = handling
        self.name = code.co_name
        self.qualname = function.__qualname__
        self.filename = code.co_filename
        self.flags = future_flags(code)
        self.free_names = code.co_freevars
        self.helpers = Helpers(self.crash, self.switch, self.compiled, self.fired)
        self._lock = threading.RLock()
        self._stub: CodeType | None = None  # the function's code while it waits for its fast path (`_install`)
        self._trying: _Trying | None = None  # in a trial's copy only: the decision tried, and where
        # Whether a continuation compiled for a site may be a segment (`_continuation`); the
        # differential test turns it off to check the continuations that hold the whole rest.
        self.segmented = True
        # What the function returns for a `SkipIteration` taken where it has no loop, given its locals:
        # a framework's step passes over its batch so (`daifu.targets`); `None`: such a skip is refused.
        self.ends_step: Callable[[dict[str, Any]], Any] | None = None
        # Whether a framework's loop calls the function as its step (`daifu.frameworks`): a fork trial of a
        # repair in it follows the framework's next calls of it (`daifu.core.step_horizon`).
        self.step = False
        self.units: dict[int, Version] = {}  # by id: hashing a code object hashes all its bytecode
        self._bound: dict[ast.stmt, set[str]] = {}  # what each faulty statement binds (`_fingerprint`)
        self._sites: dict[tuple[int, int], tuple[CodeType, Site]] = {}  # by code and offset raising (`_site`)
        self.versions: list[Version] = []
        with _collection_paused():  # thousands of new AST nodes would trigger full collections
            first = self._build(source, first_lineno)
            first.compile_anywhere(self.qualname)
            # A surgery keeps the signature: its stub is this one, renamed, not compiled on its restore path.
            self._stub_template = qualified(first.stub_code(), self.qualname) if seed is None else None
        self._install(first)
        steps.install()  # whether the program takes optimizer steps before a crash, for its trials

    # -- versions ---------------------------------------------------------------------------

    def _build(self, source: str, first_lineno: int, filename: str | None = None, number: int | None = None,
               fast: bool = True, like: Version | None = None) -> Version:
        """A new version; `fast=False` leaves its fast path to be compiled when the function needs
        it (`_install`): a surgery's, which may be derived from the version `like` it changes
        (`build_version`)."""
        number = len(self.versions) if number is None else number
        version = build_version(
            number, source, first_lineno, filename or self.filename, self.flags, self.free_names, self.helpers,
            seed=self.seed is not None, fast=fast, like=like,
        )
        if fast:
            self._fast_code(version)
        return version

    def _fast_code(self, version: Version) -> CodeType:
        """`version`'s fast path, compiled if it was not; `ValueError` if its closure is not the function's."""
        code = version.fast_code
        if code.co_freevars != self.free_names:
            raise ValueError(f"the vaccinated code of {self.qualname} needs other closure variables")
        return code

    def _install(self, version: Version) -> None:
        """Make `version` the one that runs: the function object gets its code, in place.

        A surgery's version, whose run resumes in a continuation, does not wait for its fast path:
        the function gets a stub with its signature that compiles it at the next call
        (`compiled`), and the first switch out of a segment compiles it when the interrupted
        iteration ends (`switch`), so that a call after that finds it ready.
        """
        self.versions.append(version)
        if version.anywhere is not None:
            self.units[id(version.anywhere)] = version
        if self.seed is not None and version.seed_names is not None:
            self.seed.names = version.seed_names  # the next call enters the scope of this version
        if version.compiled:
            self._give(version)
        else:
            self._stub = self.function.__code__ = self._stub_code(version)

    def _stub_code(self, version: Version) -> CodeType:
        """`version`'s stub (`Version.stub_code`): the first version's, in the new version's file, when
        the `def` line did not move (a surgery cannot change the signature); else compiled."""
        template = self._stub_template
        if template is not None and _def_lines(version.fdef) == _def_lines(self.versions[0].fdef):
            return template.replace(co_filename=version.filename)
        return qualified(version.stub_code(), self.qualname)

    def _give(self, version: Version) -> None:
        """Give the function object `version`'s fast path, in place."""
        code = qualified(self._fast_code(version), self.qualname)
        self.units[id(version.fast_code)] = self.units[id(code)] = version
        self.function.__code__, self._stub = code, None

    def compiled(self) -> FunctionType:
        """The function, running the current version's fast path, compiled now if it ran a stub:
        what the stub calls (`@rt.compiled()`) before it runs the call. Only a version whose
        generated code surely compiles waits for it (`Version.deferrable`)."""
        with self._lock:
            if self.function.__code__ is self._stub:
                self._give(self.current)
        return self.function

    @property
    def current(self) -> Version:
        return self.versions[-1]

    def replace_source(self, source: str) -> None:
        """Install a new source while the function is not running (a patch from a caller's crash).

        `PatchRefused` (nothing changed) when it does not compile or changes the signature.
        """
        new, filename = self.patched_version(source)
        register_source(filename, new.first_lineno, new.source)
        with self._lock:
            self._install(new)

    def patched_version(self, source: str) -> tuple[Version, str]:
        """The version `source` would install as a patch, and its file name; installs nothing.
        `PatchRefused` when it does not compile or changes the signature."""
        from daifu.core.patch import PatchRefused
        from daifu.core.surgery import SurgeryRefused, check_same_signature

        filename = f"{self.filename} (patch {len(self.versions)})"
        try:
            new = self._build(source, self.current.first_lineno, filename)
            check_same_signature(self.current.fdef, new.fdef)
        except (SyntaxError, ValueError, SurgeryRefused) as error:
            raise PatchRefused(f"cannot patch {self.qualname}: {error}") from None
        return new, filename

    @property
    def plain(self) -> FunctionType:
        """The function as it was before vaccination (its original code), for comparisons."""
        function = self.function
        plain = FunctionType(self.original_code, function.__globals__, self.name, function.__defaults__,
                             function.__closure__)
        plain.__kwdefaults__ = function.__kwdefaults__
        return plain

    # -- the crash --------------------------------------------------------------------------

    def crash(self, error: BaseException, cells: Any = None) -> None:
        """Called by a catcher. Returns to let `error` propagate; raises `Handover` to resume."""
        if is_passed(error):
            return
        crashed_at = time.perf_counter()
        frame = sys._getframe(1)
        if _running_trial() is not None:
            self._crash_in_trial(error, frame, cells)  # a trial never decides
        try:
            site = self._site(error, frame)
            if site is None:
                mark_passed(error)
                return
            shared = self.seed.view() if self.seed is not None else {}
            namespace, closure = _snapshot(frame, cells)
            namespace = {**shared, **namespace}
            namespace.setdefault("@call", _Invocation())
            handover = self._repair(error, frame, _Live(site, namespace, closure, shared), crashed_at)
        except StepReturned as returned:  # a trial's copy: the crashed call is over, the framework's loop goes on
            raise Handover(returned.resume, {}) from None
        except Handover:
            raise
        except Exception as internal:  # a bug of ours must never hide the user's exception
            warnings.warn(f"DaiFu could not handle the crash in {self.qualname}: {internal!r}", RuntimeWarning, 2)
            handover = None
        trial = _running_trial()
        if trial is not None:
            trial.step_lost()  # a trial's copy that was to follow the framework's loop never got back to it
        if handover is None:
            mark_passed(error)
            return
        raise handover

    def _crash_in_trial(self, error: BaseException, frame: FrameType, cells: Any) -> None:
        """A crash in a trial's copy: a repeat of the crash tried, in a later iteration, has the decision
        tried applied again, as the real run would (`Handover`); any other crash ends the trial (never
        returns) — but an exception of the header of the loop the trial looks along, past the crashed
        iteration, ends its horizon there (the copy could not have the loop's next item)."""
        from daifu.core import repair_path, trial

        trying = self._trying
        try:
            site = self._site(error, frame) if trying is not None else None
        except Exception:  # noqa: BLE001 - where it crashed cannot be told: the trial ends at it
            site = None
        if trying is None or site is None:
            trial.crashed(error, frame)
            return
        again = site.version is trying.site.version and site.path == trying.site.path
        if again and type(error) is type(trying.crash.exception) and not repair_path.changes_code(trying.decision) \
                and trial.may_apply_again():
            shared = self.seed.view() if self.seed is not None else {}
            namespace, closure = _snapshot(frame, cells)
            live = _Live(site, {**shared, **namespace}, closure, shared)
            live.namespace.setdefault("@call", _Invocation())
            sizes = repair_path.sizes(live.namespace)
            try:
                handover = self._prepare(trying.decision, trying.crash, live.copy(), Flavour.TRIAL,
                                         raised=(error, frame), give_back=not trial.in_process())
            except Exception:  # noqa: BLE001 - refused here, or a bug of ours: the trial ends at the crash
                trial.crashed(error, frame)
                return
            rows, what = repair_path.dropped(sizes, repair_path.sizes(handover.namespace))
            trial.applied(repair_path.passes_over(trying.decision), rows, what)
            raise handover
        fetching = (site.header and site.version is trying.resumed.version and _kind(site.node) in ("for", "while")
                    and _encloses(site.path, trying.resumed.path) and not (again and type(error) is type(trying.crash.exception)))
        trial.crashed(error, frame, fetching)

    def _site(self, error: BaseException, frame: FrameType) -> Site | None:
        """The faulty statement of a crash in `frame`; found once for each instruction that raises (a
        repeated crash finds it in `_sites`)."""
        code = frame.f_code
        version = self.units.get(id(code))
        raised = raising_instruction(error, frame) if version is not None else None
        if version is None or raised is None:
            return None
        line, offset = raised
        known = self._sites.get((id(code), offset))
        if known is not None and known[0] is code:  # the code object itself: an id may be reused
            return known[1]
        col = column(code, offset) if line in version.shared_lines else None
        found = locate(version.fdef.body, line, col)
        if found is None:
            return None
        node, header = found
        site = self._sites[(id(code), offset)] = code, Site(version, path_of(node), header)
        return site[1]

    def _describe(self, error: BaseException, frame: FrameType, live: _Live, tried: list[tuple[str, str]]) -> Crash:
        """The crash as the layers above see it; `tried` is this site's account of what was tried, which
        the runtime (and a decider, through its `RepairContext`) adds to while the crash is offered."""
        from daifu.core.crash import Crash

        site = live.site
        node = site.node
        previous = self._previous(site, live.namespace)
        crash = Crash(
            exception=error,
            function_name=self.name,
            qualname=self.qualname,
            source=site.version.source,
            filename=self.filename,
            first_lineno=site.version.first_lineno,
            lineno=node.lineno,
            statement=site.version.statement_text(node, header_only=site.header),
            kind=_kind(node) if site.header else "statement",
            locals=MappingProxyType(_user_view(live.namespace)),
            attempt=previous.attempt + 1 if previous is not None else 1,
            frame=frame,
            tried=tried,
            check=lambda decision: self.check(decision, site, live.namespace),
            trial=lambda decision, seconds=None, horizon=None, in_process_up_to=None: self.trial(
                decision, crash, live, seconds, horizon, in_process_up_to),
            globals=frame.f_globals,
        )
        if previous is not None:
            tried.extend(previous.tried)
        return crash

    def _repair(self, error: BaseException, frame: FrameType, live: _Live, crashed_at: float) -> Handover | None:
        """Ask for decisions until one can be carried out; `None` means give up (Raise): the one place
        where a described crash's exception goes on, so the layers above may rescue what it held first."""
        tried: list[tuple[str, str]] = []
        crash = self._describe(error, frame, live, tried)
        handover = self._decided(crash, live, tried, crashed_at)
        if handover is None:
            self.handling.unrepaired(crash)
        return handover

    def _decided(self, crash: Crash, live: _Live, tried: list[tuple[str, str]], crashed_at: float) -> Handover | None:
        """The hand-over of the first decision that can be carried out, or `None` (Raise, no progress,
        every decision refused)."""
        from daifu.core.decisions import Raise

        handling = self.handling
        settings = handling.settings()
        if self._poisoned(crash, settings):
            return None
        limit = settings.max_attempts
        if crash.attempt > limit:
            handling.note(f"{self.qualname}: {crash.attempt - 1} repairs at line {crash.lineno} made no progress; raising")
            return None
        entry = handling.begin(crash, settings)
        context = RepairContext(settings, entry, tried)
        account = self._account(crash)
        for _offer in range(limit + 1):
            context.watch = None  # each offer's decider says afresh whether it watches
            decision, decided_by = handling.decide(crash, context)
            if entry.number not in account.repairs:
                account.repairs.append(entry.number)
            if context.watch is None:
                account.budget = None  # not an automatic repair: the site's budget was for those
            if context.edited_locals is not None:
                edited = {k: v for k, v in dict(context.edited_locals).items() if k not in _TEMPORARIES}
                live.namespace = {**live.shared, **edited, "@call": live.namespace["@call"]}
            if isinstance(decision, Raise):
                entry.failed(decided_by)
                return None
            collecting = gc.isenabled()
            gc.disable()  # no full collection inside the restore window: it is paused until the run resumes
            try:
                handover = self._prepare(decision, crash, live.copy(), watch=context.watch, entry=entry)
            except RepairRefused as refusal:
                if collecting:
                    gc.enable()
                tried.append((repr(decision), f"refused: {refusal}"))
                entry.refused(decision, decided_by, str(refusal))
                continue
            except BaseException:
                if collecting:
                    gc.enable()
                raise
            handover.collecting = collecting
            handover.release = _releasing(crash.exception)
            entry.decided(decision, decided_by)
            if all(done[0] != repr(decision) for done in tried):
                tried.append((repr(decision), f"applied ({decided_by})"))  # a repeat of this crash will say so
            handover.started = crashed_at
            handover.entry = entry
            return handover
        entry.failed("refusals")
        return None

    def _poisoned(self, crash: Crash, settings: Any) -> bool:
        """Whether the crash is a CUDA error that leaves this process's CUDA context unusable
        (`daifu.core.cuda.poisoned`): then no repair is asked for, tried or carried out here — every
        later CUDA call would fail with it again — and the record and the terminal say so."""
        from daifu.core import cuda

        why = cuda.poisoned(crash.exception)
        if why is None:
            return False
        entry = self.handling.begin(crash, settings)
        self.handling.note(f"{self.qualname}: {why}: the CUDA context of this process is unusable after it; "
                           "no repair is attempted in this process")
        entry.failed("a CUDA error that leaves the CUDA context unusable: no repair is attempted in this process")
        return True

    # -- carrying out a decision ------------------------------------------------------------

    def _prepare(self, decision: Decision, crash: Crash, live: _Live, flavour: Flavour = Flavour.PLAIN,
                 watch: Callable[[FrameType], bool] | None = None, entry: RepairEntry | None = None,
                 raised: tuple[BaseException, FrameType | None] | None = None, give_back: bool = True) -> Handover:
        """The hand-over that resumes the run with `decision` carried out on `live` (the iterations after
        it watched by `watch`, if a decider set one; recorded in `entry`).

        A run resumed at a `for` header whose iterator raised `raised` (the exception and the frame it
        crashed; by default the crash's) loads the item that failed again where it can (`_reload`), by
        giving it back to the iterator (with `give_back`: not in an in-process trial, which never takes
        from the live run's iterators), unless the decision passes it over (`SkipIteration`).

        What it passes over at this crash (`_passed_over`) is counted in the account of the crash's
        site; in the real run the layers above judge it first (`Handling.passed_over`), and a firing
        past the budget refuses the decision.

        The steps of several plays (`Plays`) are carried out in order on one namespace: each action
        on what the previous steps left, each surgery validated against the version the previous
        one produced; then one resume. Only actions and surgeries change anything: a surgery is
        installed once every step is carried out, and if a step is refused the module globals the
        actions bound are put back, so a refused decision leaves the program as it was (an action's
        in-place mutations of objects excepted). A surgery's version derived from the one it changes
        (`build_version(like=...)`) is compiled here: with the code that resumes the run when that
        holds its new statements (`Version.holds_change`), else as written, before it.
        """
        from daifu.core.decisions import Action, Patch, Plays, Retry, Skip, SkipIteration, Surgery
        from daifu.core.refetch import Reload

        site, namespace = live.site, live.namespace
        if self.seed is not None:
            self.seed.write_back(namespace, live.shared)  # the console's edits, before any action reads them
        here, mode = site, self._retry_mode(site, namespace)
        passing = False  # whether the last step that moves the resume point passes over the item that failed
        plans: list[SurgeryPlan] = []
        bound: list[Undo] = []
        before = dict(namespace)
        try:
            for step in decision.steps if isinstance(decision, Plays) else (decision,):
                if isinstance(step, Skip):
                    mode, passing = self._skip_mode(here), False
                elif isinstance(step, SkipIteration):
                    mode, passing = self._skip_iteration_mode(here, namespace), True
                elif isinstance(step, Surgery):
                    plan = self._plan(step.source, here, len(self.versions) + len(plans))
                    plans.append(plan)
                    here = Site(plan.version, plan.path, site.header)
                    mode, passing = self._retry_mode(here, namespace) if plan.same else Mode.AT, False
                elif isinstance(step, Action):
                    bound.append(self._run_action(step.code, here.version, namespace, live))
                elif not isinstance(step, (Retry, Patch)):
                    raise RepairRefused(f"{step!r} is not a DaiFu decision")
            ending = self._ends_step(here, mode)
            _loop_goes_on(here, mode, namespace)
            loading = self._reload(here, mode, raised or (crash.exception, crash.frame), namespace,
                                   here.path == site.path and here.version is site.version)
            if not ending and with_depth(here.version.fdef, here.path) < with_depth(site.version.fdef, site.path):
                mode = self._leaving(site, here, mode, namespace)
            if flavour is Flavour.PLAIN and watch is not None:
                flavour = Flavour.WATCHED
            for plan in plans:  # the snapshot as the continuation receives it (a copy: a refusal loses it)
                plan.carry(namespace)
            for name in here.version.scope.finally_states:
                namespace.setdefault(name, None)
            for plan in plans:  # new statements the code resuming the run will not hold are compiled now
                if plan is not plans[-1] or not plan.version.holds_change(here.path):
                    _compiles(plan.version)
            if ending:
                returned = self._step_result(namespace)
            else:
                code, resume_point = self._continuation(here.version, here.path, mode, flavour, namespace)
            self._count(self._firings(here, mode, before, namespace, loading, passing), crash, flavour, entry)
        except (RepairRefused, CannotResume, SyntaxError) as refusal:  # SyntaxError: a surgery's new statements
            from daifu.core.actions import undo

            for journal in reversed(bound):
                undo(self.function.__globals__, journal)
            reason = _not_compiling(refusal) if isinstance(refusal, SyntaxError) else str(refusal)
            raise RepairRefused(reason) from None
        if isinstance(decision, Patch):
            from daifu.core.patch import PatchRefused, patch_function, resolve

            try:
                patch_function(resolve(decision.target), decision.source)
            except PatchRefused as refusal:
                raise RepairRefused(str(refusal)) from None
        for plan in plans:
            with self._lock:
                self._install(plan.version)
        for name, cell in live.cells.items():  # a closure variable rebound by an action or the console
            if name in namespace:
                cell.cell_contents = namespace[name]
        version = here.version
        if self.seed is not None:  # what the actions left in the module is the function's state now
            for name in self.seed.names.shared:
                namespace.pop(name, None)
            namespace.update(self.seed.view())
        self._remember(version, here.path, site, namespace, crash)
        if flavour is Flavour.WATCHED:
            self.helpers.watching = watch
        if ending:
            return self._handover(lambda _locals: returned, namespace)
        handover = self._handover(self._resuming(code, version, namespace, live.cells, resume_point), namespace)
        if isinstance(loading, Reload) and not passing and give_back:
            loading.give_back()  # the last thing done: nothing after it refuses the decision
            if entry is not None:
                entry.extra["loaded_again"] = "the batch the DataLoader failed to load is loaded again"
        return handover

    def _ends_step(self, here: Site, mode: Mode) -> bool:
        """Whether a `SkipIteration` at `here`, in no loop of the function, ends the call with what
        `ends_step` returns; `RepairRefused` when a `with` statement holds the statement: it would not
        be exited (a framework's step crashed inside one passes over its batch from a function above)."""
        if mode is not Mode.NEXT_ITERATION or self.ends_step is None:
            return False
        from daifu.core.account import loop_around

        if loop_around(here.version.fdef, here.path) is not None:
            return False
        if with_depth(here.version.fdef, here.path):
            raise RepairRefused(f"the faulty statement is inside a `with` statement of {self.qualname}: ending the "
                                "step there would leave it open")
        return True

    def _step_result(self, namespace: dict[str, Any]) -> Any:
        """What a step that passes over its batch returns (`ends_step`); `RepairRefused` when making it fails."""
        assert self.ends_step is not None
        try:
            return self.ends_step(namespace)
        except Exception as error:
            raise RepairRefused(f"{self.qualname} cannot pass over its batch: making what it returns failed "
                                f"({error!r})") from None

    def _firings(self, here: Site, mode: Mode, before: dict[str, Any], namespace: dict[str, Any],
                 loading: Reload | str | None, passing: bool) -> list[Firing]:
        """What a decision carried out at a crash passes over (`_passed_over`); none, said as DaiFu's
        failure, when reading it fails: counting never costs the repair."""
        try:
            return self._passed_over(here, mode, before, namespace, loading, passing)
        except Exception as internal:
            warnings.warn(f"DaiFu could not count what a repair of {self.qualname} passed over: {internal!r}",
                          RuntimeWarning, 2)
            return []

    @staticmethod
    def _passed_over(here: Site, mode: Mode, before: dict[str, Any], namespace: dict[str, Any],
                     loading: Reload | str | None = None, passing: bool = False) -> list[Firing]:
        """What a decision carried out at a crash passes over, resuming at `here` in `mode`: the rest of
        the iteration (`SkipIteration`), the statement skipped, the rest of a loop ended by skipping its
        header, the item a loop header failed to load (`passing`: a `SkipIteration` passed it over;
        else `loading` could not load it again, and says why), the rows its actions dropped (`before`:
        the locals before they ran)."""
        from daifu.core.account import (
            Firing,
            dropped_rows,
            held_rows,
            iteration_firing,
            loop_around,
            plan_of,
            work_of,
        )
        from daifu.core.refetch import Reload

        fdef, path = here.version.fdef, here.path
        firings: list[Firing] = []
        dropped = dropped_rows(before, namespace)
        around = loop_around(fdef, path)
        iterator = namespace.get(f"@it{around[1]}") if around and isinstance(around[0], ast.For) else None
        if dropped:
            firings.append(Firing("rows", dropped, 1, 0, 0, plan_of(iterator), iterator, held_rows(before)))
        if mode is Mode.NEXT_ITERATION:
            found = iteration_firing("skip-iteration", fdef, path, namespace)
            if found is None:  # in no loop: a step ended (`ends_step`), its batch passed over, its size unknown
                statements, steps = work_of([here.node])
                found = Firing("skip-step", None, 1, statements, steps)
            firings.append(found)
        elif mode is Mode.AFTER:
            statements, steps = work_of([here.node])
            firings.append(Firing("skip", 0, 1, statements, steps, plan_of(iterator), iterator))
        elif mode in (Mode.LOOP_EXHAUSTED, Mode.LOOP_NEXT) and isinstance(here.node, ast.For):
            depth = sum(isinstance(node_at(fdef, path[:end]), ast.For) for end in range(1, len(path), 2))
            own = namespace.get(f"@it{depth}")
            if mode is Mode.LOOP_EXHAUSTED:
                firings.append(Firing("skip-loop", None, 1, 0, 0, plan_of(own), own))
            elif passing:
                samples = loading.samples if isinstance(loading, Reload) else None
                firings.append(Firing("next-item", samples, 1, 0, 0, plan_of(own), own))
            elif not isinstance(loading, Reload):
                firings.append(Firing("next-item", None, 1, 0, 0, plan_of(own), own, why=loading))
        return firings

    @staticmethod
    def _account(crash: Crash) -> Account:
        """The account of what the repairs of the crash's site passed over (`daifu.core.account`)."""
        from daifu.core.account import account_of

        return account_of(crash.site, f"{os.path.basename(crash.filename)}:{crash.lineno}")

    def _count(self, firings: list[Firing], crash: Crash, flavour: Flavour, entry: RepairEntry | None) -> None:
        """Count `firings` in the account of the crash's site: in a trial's copy, only counted; in the
        real run, judged and recorded by the layers above first (`RepairRefused` past the budget)."""
        if not firings:
            return
        account = self._account(crash)  # what a decision passes over is counted in its site's account
        for firing in firings:
            if flavour is Flavour.TRIAL:
                account.add(firing)
                continue
            reason = self.handling.passed_over(account, firing, entry)
            if reason is not None:
                raise RepairRefused(reason)

    def fired(self, number: int, path: Path, frame: FrameType, cells: Any, before: dict[str, Any] | None) -> None:
        """Called by a surgery's probe (`daifu.core.account.Probe`): count what it passes over in the
        account of the repair that introduced it. In the real run the layers above judge it first; past
        the budget the surgery's version is taken back (`_take_back`): the original statements run
        instead, and the original exception raises again where it did. A failure of DaiFu's own here
        is said as DaiFu's, and the program goes on as the surgery made it."""
        from daifu.core.account import account_of, dropped_by_rebinding, held_rows, probe, probe_firing

        try:
            version = self.units.get(id(frame.f_code))
            if version is None:
                return
            found = probe(number)
            namespace = ChainMap(frame.f_locals, frame.f_globals)
            dropped = dropped_by_rebinding(before, namespace, version.fdef, path) if before is not None else 0
            firing = probe_firing(found, version.fdef, path, namespace, dropped,
                                  held_rows(before) if before is not None else None)
            if firing is None:
                return
            account = account_of(found.site, found.where)
            if _running_trial() is not None:
                account.add(firing)  # the copy counts; it never judges, records or takes anything back
                return
            stop = self.handling.passed_over(account, firing, None)
        except Exception as internal:  # a bug of ours must never become the program's exception
            warnings.warn(f"DaiFu could not count what a repair of {self.qualname} passed over: {internal!r}",
                          RuntimeWarning, 2)
            return
        if stop is not None:
            self._take_back(found.surgery, found.undo, version, path, frame, cells, before or {})

    def _take_back(self, surgery: str, undo: str, version: Version, path: Path, frame: FrameType, cells: Any,
                   before: dict[str, Any]) -> None:
        """Resume the run of `frame` (at the statement at `path` of `version`, made by surgery `surgery`)
        in a new version with the source `undo` that surgery changed, at the statement corresponding
        to that one; what a rebinding bound goes back to `before`. A version another surgery made
        since, or one that cannot be taken back, runs on (the layers above said so)."""
        if version.source != surgery:
            return
        namespace, closure = _snapshot(frame, cells)
        namespace.update(before)
        namespace.setdefault("@call", _Invocation())
        here = Site(version, path, False)
        try:
            with _collection_paused():
                plan = self._plan(undo, here, probed=False)
                back = Site(plan.version, plan.path, False)
                mode = Mode.AT
                if with_depth(back.version.fdef, back.path) < with_depth(version.fdef, path):
                    mode = self._leaving(here, back, mode, namespace)
                plan.carry(namespace)
                for name in plan.version.scope.finally_states:
                    namespace.setdefault(name, None)
                if not plan.version.holds_change(plan.path):
                    _compiles(plan.version)
                code, resume_point = self._continuation(plan.version, plan.path, mode, Flavour.PLAIN, namespace)
        except (RepairRefused, CannotResume, SyntaxError) as refusal:
            self.handling.note(f"{self.qualname}: the surgery could not be taken back: {refusal}")
            return
        with self._lock:
            self._install(plan.version)
        raise self._handover(self._resuming(code, plan.version, namespace, closure, resume_point), namespace)

    def _run_action(self, code: str, version: Version, namespace: dict[str, Any], live: _Live) -> Undo:
        """Run an action; the module globals it bound, with their old values. `RepairRefused` if it fails.

        Under the prototype's scope model the action runs as the prototype ran it, in the module's
        namespace (which holds the function's variables); else in the crashed function's scope.
        """
        from daifu.core.actions import ActionFailed, run_action, run_module_action

        globals_ = self.function.__globals__
        try:
            if self.seed is not None:
                return run_module_action(code, globals_, self.flags)
            local_names = set(version.scope.plain_locals) | set(live.cells)
            return run_action(code, namespace, local_names, globals_, self.flags)
        except ActionFailed as failure:
            raise RepairRefused(str(failure)) from None

    @staticmethod
    def _leaving(site: Site, here: Site, mode: Mode, namespace: dict[str, Any]) -> Mode:
        """The mode of a run that a surgery resumes at `here`, above `with` statements in which it
        crashed (`site`): it exits them first (`Mode.ABOVE`, `Rewriter._leaving`), and the
        managers of deeper `with` statements, which are not open, are set to `None` for that.
        `RepairRefused` when a later step would resume it otherwise (a skip): they would never exit."""
        if mode is not Mode.AT:
            raise RepairRefused("a skip cannot follow a surgery whose run resumes above the `with` statement "
                                "it crashed in: that statement would never be exited")
        open_below = with_depth(site.version.fdef, site.path)
        for name in here.version.scope.plain_locals:
            if name.startswith(("@cm", "@ex")) and name[3:].isdigit() and int(name[3:]) >= open_below:
                namespace[name] = None
        return Mode.ABOVE

    def _retry_mode(self, site: Site, namespace: dict[str, Any]) -> Mode:
        return Mode.LOOP_NEXT if _loop_iterator(site, namespace) is not None else Mode.AT

    def _skip_iteration_mode(self, site: Site, namespace: dict[str, Any] | None) -> Mode:
        """A `SkipIteration` at the header of a `for` loop whose iterator failed to load an item passes
        over that item: the loop goes on with the next one (`Mode.LOOP_NEXT`). Anywhere else (a `for`
        header whose iterator could not be made, or is a generator that ended when it raised, which
        has no next item; a `while` test) it leaves the rest of the iteration of the loop around the
        statement, as a `continue` there would."""
        iterator = _loop_iterator(site, namespace) if namespace is not None else None
        if iterator is not None and not finished_generator(iterator):
            return Mode.LOOP_NEXT
        return Mode.NEXT_ITERATION

    @staticmethod
    def _reload(here: Site, mode: Mode, raised: tuple[BaseException, FrameType | None],
                namespace: dict[str, Any], crashed: bool = False) -> Reload | str | None:
        """For a run resumed at a `for` header asking its iterator for its next item: the item that
        failed to load, ready to be loaded again (`daifu.core.refetch`), or why it cannot be; `None`
        for any other resume. A failure of DaiFu's own here is a reason: the loop goes on as before.
        At the crashed statement itself (`crashed`), run again, one that takes its batch with `next`
        (`batch = next(data_iter)`) gets that batch again where it can (`_statement_reload`)."""
        if mode is Mode.AT and crashed and not here.header:
            return _statement_reload(here.node, raised, namespace)
        if mode is not Mode.LOOP_NEXT or not isinstance(here.node, ast.For):
            return None
        from daifu.core.refetch import reload

        error, frame = raised
        if frame is None:
            return "the frame that crashed is not known"
        try:
            return reload(error, frame, _loop_iterator(here, namespace))
        except Exception as internal:  # noqa: BLE001 - never costs the repair: the loop goes on as before
            return f"DaiFu could not tell whether it can be ({internal!r})"

    def _skip_mode(self, site: Site) -> Mode:
        if site.header and _kind(site.node) in ("for", "while"):
            return Mode.LOOP_EXHAUSTED
        return Mode.AFTER

    def _plan(self, source: str, site: Site, number: int | None = None, probed: bool = True) -> SurgeryPlan:
        """Build and validate a new version (numbered `number`, by default the next) without
        installing it; `RepairRefused` says why. With `probed`, the statements it changes that may
        pass over work are counted each time they run (`daifu.core.account.find_probes`).

        Whether the run can resume at the planned path is left to whoever builds the continuation
        there (`_prepare` builds it anyway; `check` builds one for that alone): building it here too
        cost every surgery a second build."""
        from daifu.core.surgery import SurgeryRefused, plan_surgery

        number = len(self.versions) if number is None else number
        filename = f"{self.filename} (surgery {number})"
        try:
            new = self._build(source, site.version.first_lineno, filename, number, fast=False, like=site.version)
            if probed:
                self._probe(new, site)
            if not new.deferrable:
                self._fast_code(new)
        except SyntaxError as error:
            raise RepairRefused(_not_compiling(error)) from None
        except ValueError as error:
            raise RepairRefused(f"the new source is refused: {error}") from None
        try:
            # looked up only for the names the new source reads that the old one did not: seldom any
            known = ChainMap(self.function.__globals__, dict.fromkeys(self.free_names))
            plan = plan_surgery(site.version, new, site.path, known)
        except SurgeryRefused as refusal:
            raise RepairRefused(str(refusal)) from None
        register_source(filename, new.first_lineno, new.source)
        return plan

    def _probe(self, new: Version, site: Site) -> None:
        """Give a surgery's version `new` of `site.version` its probes, before any of its code is built."""
        from daifu.core.account import find_probes

        old, line = site.version, site.node.lineno
        key = (self.qualname, self.filename, line)
        where = f"{os.path.basename(self.filename)}:{line}"
        new.probes = find_probes(old.fdef, old.lines, old.probes, new.fdef, new.lines, new.first_lineno,
                                 key, where, new.source, old.source)

    def check(self, decision: Decision, site: Site, namespace: dict[str, Any] | None = None) -> str | None:
        """Why `decision` would be refused at `site` (with the crashed frame's `namespace`), or `None`;
        changes nothing (a dry run).

        The steps of several plays are checked in order, each surgery against the previous one's version.
        """
        from daifu.core.decisions import Action, Patch, Plays, Skip, SkipIteration, Surgery

        here, planned, mode = site, 0, Mode.AT
        try:
            steps = decision.steps if isinstance(decision, Plays) else (decision,)
            if namespace is not None and not any(isinstance(s, (Skip, SkipIteration, Surgery)) for s in steps):
                _loop_goes_on(site, self._retry_mode(site, namespace), namespace)
            for step in decision.steps if isinstance(decision, Plays) else (decision,):
                if isinstance(step, Surgery):
                    plan = self._plan(step.source, here, len(self.versions) + planned, probed=False)
                    _compiles(plan.version)  # all of it: a dry run compiles no continuation
                    here, planned, mode = Site(plan.version, plan.path, site.header), planned + 1, Mode.AT
                    here.version.rewriter.continuation(here.version.fdef, here.path, Mode.AT)
                elif isinstance(step, Action):
                    compile(step.code, "<daifu action>", "exec", dont_inherit=True)
                elif isinstance(step, SkipIteration):
                    mode = self._skip_iteration_mode(here, namespace)
                    if not self._ends_step(here, mode):
                        here.version.rewriter.continuation(here.version.fdef, here.path, mode)
                elif isinstance(step, Skip):
                    mode = Mode.AFTER
            if with_depth(here.version.fdef, here.path) < with_depth(site.version.fdef, site.path):
                self._leaving(site, here, mode, {})
            if isinstance(decision, Patch):
                from daifu.core.patch import PatchRefused, check_patch

                try:
                    check_patch(decision.target, decision.source)
                except PatchRefused as refusal:
                    return str(refusal)
        except RepairRefused as refusal:
            return str(refusal)
        except CannotResume as refusal:
            return str(refusal)
        except SyntaxError as error:
            return f"the action does not parse: line {error.lineno} of the action: {error.msg}"
        return None

    def trial(self, decision: Decision, crash: Crash, live: _Live, seconds: float | None = None,
              horizon: int | None = None, in_process_up_to: int | None = None) -> Verdict:
        """Try `decision` in a sandboxed copy of this process, through the real resume path, looking
        `horizon` iterations past the crashed one (`daifu.core.trial.run`).

        The trial watches the frame's locals and the module globals the function uses (a model
        kept in a global is trained state too). In the copy, what the decision passes over is noted
        each time it is applied, and a surgery's own statements are counted as they run
        (`daifu.core.repair_path`).

        in_process_up_to: bytes. Where a forked copy would run the trial and the `trials` setting leaves
        the choice to DaiFu (`auto`), it runs in process (`daifu.core.inprocess`) when the state it must
        copy and put back fits in them: for a small model, copying its state costs less than a fork and
        its sandbox. A state that does not fit is not copied, and the trial runs in a forked copy.
        """
        from daifu.core import repair_path, sandbox, trial

        used = set(live.site.version.plain_code.co_names)
        globals_ = self.function.__globals__

        def view(frame: FrameType | None) -> dict[str, Any]:
            seen = frame.f_globals if frame is not None else globals_
            values = {name: seen[name] for name in used if name in seen}
            values.update(_user_view(dict(frame.f_locals)) if frame is not None else {})
            return values

        def run() -> Any:
            resumed = live.copy()
            sizes = repair_path.sizes(resumed.namespace)
            handover = self._prepare(decision, crash, resumed, Flavour.TRIAL, give_back=not in_process)
            if in_process:
                inprocess.hold(handover.namespace)  # the live run's loop iterators are never advanced
            self._trying = _Trying(decision, crash, live.site, self._resumed_site(decision, live.site))
            rows, what = repair_path.dropped(sizes, repair_path.sizes(handover.namespace))
            if repair_path.changes_code(decision):
                version = self.current
                change = repair_path.changed(crash.source, version.source, version.first_lineno, version.filename)
                if change is not None:
                    repair_path.LineCounter(change, trial.code_ran, trial.passed_over).install()
            else:
                trial.applied(repair_path.passes_over(decision), rows, what)
            try:
                result = handover.continuation(handover.start())
                while isinstance(result, Handover):  # a repeat of the crash, the decision applied again
                    result = result.continuation(result.start())
            except sandbox.SandboxStop as stop:
                stop.frame = self._own_frame(stop)
                raise
            return result

        before = {**{name: globals_[name] for name in used if name in globals_}, **_user_view(live.namespace)}
        kind, why = trial.how()
        small = in_process_up_to is not None and kind == trial.FORK and self.handling.settings().trials == "auto"
        in_process = kind == trial.IN_PROCESS or small
        if in_process:
            from daifu.core import inprocess
            from daifu.core.trial_memory import size

            cap = in_process_up_to if small else None
            why = f"its state fits in {size(cap)}: copying it costs less than a fork" if cap is not None else why
            verdict = inprocess.run(run, before, view, lambda: self._snapshot(decision, live, before, cap), why,
                                    seconds, horizon)
            if not small or verdict.outcome is not trial.Outcome.UNAVAILABLE:
                return verdict
            in_process = False  # the state does not fit: nothing was copied or run, a fork trial runs
        return trial.run(decision, run, before, view, seconds, horizon, self._calls(crash))

    def _calls(self, crash: Crash) -> step_horizon.Calls | None:
        """The calls of this function a fork trial follows past the crashed one: where it is a framework's
        step (`step`) called from the program's own code (`daifu.core.step_horizon`); else `None`."""
        from daifu.core import trial

        if not self.step:
            return None
        function, units = self.function, self.units

        def is_step(code: CodeType) -> bool:
            return code is function.__code__ or id(code) in units

        anchor = step_horizon.anchor(crash.frame, is_step, trial.own_code)
        return step_horizon.Calls(is_step, anchor) if anchor is not None else None

    def _snapshot(self, decision: Decision, live: _Live, watched: dict[str, Any], cap: int | None = None) -> Any:
        """What an in-process trial of `decision` must put back (`daifu.core.rollback`): the state reachable
        from `watched`, the crashed frame's locals, the module's globals, and the runtime's own; within the
        `trial_memory` setting and `cap` bytes."""
        from daifu.core import rollback

        setting = self.handling.settings().trial_memory
        limit = cap if setting is None else setting if cap is None else min(setting, cap)
        return rollback.take(watched, _user_view(live.namespace), self.function.__globals__, limit,
                             [self._runtime_undo(decision, live)])

    def _runtime_undo(self, decision: Decision, live: _Live) -> Callable[[], None]:
        """What puts back the runtime's own state as carrying `decision` out on `live` changes it: the
        versions and the function's code (a surgery), a patched function's code, the closure's cells,
        the progress noted for a repeat of the crash, the accounts of what repairs passed over, and the
        optimizer steps counted."""
        from daifu.core.decisions import Patch
        from daifu.state import RUN

        function, versions, units, code = self.function, list(self.versions), dict(self.units), self.function.__code__
        stub, trying, watching = self._stub, self._trying, self.helpers.watching
        seed_names = self.seed.names if self.seed is not None else None
        cells = {name: (cell, _contents(cell)) for name, cell in live.cells.items()}
        call = live.namespace.get("@call")
        progress = dict(call.progress) if call is not None else {}
        accounts = dict(RUN.accounts)
        figures = {site: {**vars(account), "repairs": list(account.repairs)} for site, account in accounts.items()}
        taken = steps.taken()
        patched = self._patch_target(decision) if isinstance(decision, Patch) else None
        patched_code = patched.__code__ if patched is not None else code

        def undo() -> None:
            self.versions[:] = versions
            self.units.clear()
            self.units.update(units)
            function.__code__, self._stub, self._trying, self.helpers.watching = code, stub, trying, watching
            if self.seed is not None and seed_names is not None:
                self.seed.names = seed_names
            for cell, contents in cells.values():
                cell.cell_contents = contents
            if call is not None:
                call.progress.clear()
                call.progress.update(progress)
            RUN.accounts.clear()
            RUN.accounts.update(accounts)
            for site, account in accounts.items():
                vars(account).update(figures[site])
            if taken is not None:
                steps.count(taken)
            if patched is not None:
                patched.__code__ = patched_code
        return undo

    @staticmethod
    def _patch_target(decision: Any) -> FunctionType | None:
        """The function a patch decision would change, or `None` when it cannot be found."""
        from daifu.core.patch import resolve

        try:
            return resolve(decision.target)
        except Exception:  # noqa: BLE001 - then the patch is refused, changing nothing
            return None

    def _resumed_site(self, decision: Decision, site: Site) -> Site:
        """Where the run resumes in the version that runs after `decision` (just carried out): a surgery's
        counterpart of `site` in its new version; else `site`."""
        version = self.current
        if version is site.version:
            return site
        from daifu.core.surgery import SurgeryRefused, resume_path

        try:
            path = resume_path(site.version, version, site.path)[0]
        except (SurgeryRefused, CannotResume, ValueError):
            return site
        return Site(version, path, site.header)

    def _own_frame(self, error: BaseException) -> FrameType | None:
        """The deepest frame of this function's code in `error`'s traceback."""
        found = None
        tb = error.__traceback__
        while tb is not None:
            if id(tb.tb_frame.f_code) in self.units:
                found = tb.tb_frame
            tb = tb.tb_next
        return found

    def _continuation(self, version: Version, path: Path, mode: Mode, flavour: Flavour,
                      snapshot: dict[str, Any] | None = None) -> tuple[CodeType, tuple[int] | None]:
        """The code that resumes `version` at `path` in `mode`, and the defaults to call it with:
        the version's resume-anywhere code and the number of the point, when it has them (see
        `Rewriter.anywhere`); else, given the `snapshot` it will resume, a segment that holds the
        rest of the interrupted iteration only (`Rewriter.segment`, the rest is compiled when the
        run gets there: `switch`); else a continuation for this site alone. Each is compiled once."""
        point = version.points.get((path, mode)) if flavour is Flavour.PLAIN else None
        if version.anywhere is not None and point is not None:
            return version.anywhere, (point,)
        plain = flavour is Flavour.PLAIN and self.seed is None
        if snapshot is not None and self.segmented and plain and version.deferrable:
            present = tuple(name for name in version.scope.plain_locals if name in snapshot)
            code = self._segment(version, path, mode, present)
            if code is not None:
                return code, None
        key = (path, mode, flavour)
        code = version.continuations.get(key)
        if code is None:
            rewriter = {
                Flavour.PLAIN: version.rewriter,
                Flavour.TRIAL: version.trial_rewriter,
                Flavour.WATCHED: version.watched_rewriter,
            }[flavour]
            code = version.compile_continuation(rewriter.continuation(version.fdef, path, mode), self.qualname)
            if flavour is not Flavour.TRIAL:  # a trial's continuation lives and dies in its copy
                version.continuations[key] = code
            self.units[id(code)] = version
        return code, None

    def _segment(self, version: Version, path: Path, mode: Mode, present: tuple[str, ...]) -> CodeType | None:
        """The segment resuming `version` at `path` in `mode` a snapshot holding the locals `present`,
        compiled once; `None` if there is none."""
        key = (path, mode, present)
        if key not in version.segments:
            tree = version.rewriter.segment(version.fdef, path, mode, version.number, present)
            code = None if tree is None else version.compile_continuation(tree, self.qualname)
            if code is not None:
                self.units[id(code)] = version
            version.segments[key] = code
        return version.segments[key]

    def switch(self, number: int, path: Path, mode: str, cells: Any = None) -> None:
        """Called by a segment where the code it leaves out starts: hand the run over to the
        continuation of version `number` resuming at `path` in `mode` (compiled now, once), with
        the segment's locals. A `Handover`, as after a repair, but no repair: nothing is recorded.

        Building that continuation cannot be refused (the segment entered the same statements), and
        only a version whose generated code surely compiles has segments (`Version.deferrable`);
        should compiling it fail all the same, the run cannot go on, and says why.
        """
        frame = sys._getframe(1)
        while id(frame.f_code) not in self.units:  # the segment's frame, whatever wraps this method
            frame = frame.f_back  # type: ignore[assignment]
        namespace, closure = _snapshot(frame, cells)
        version = next(v for v in self.versions if v.number == number)
        try:
            with _collection_paused():
                code, resume_point = self._continuation(version, path, Mode(mode), Flavour.PLAIN)
                self.compiled()  # the interrupted iteration is over: the next call need not wait either
        except (SyntaxError, RecursionError, CannotResume) as error:
            raise RuntimeError(
                f"DaiFu could not continue {self.qualname} after the repaired iteration: {error!r}"
            ) from None
        raise self._handover(self._resuming(code, version, namespace, closure, resume_point), namespace)

    def _handover(self, continuation: Any, namespace: dict[str, Any]) -> Handover:
        """The hand-over to `continuation` with `namespace`; under the prototype's scope model it binds
        again the module globals the unwinding unbound (`SeedScope.rebind`)."""
        return Handover(continuation, namespace, rebind=self.seed.rebind if self.seed is not None else None)

    def _resuming(self, code: CodeType, version: Version, namespace: dict[str, Any], cells: dict[str, CellType],
                  resume_point: tuple[int] | None) -> Any:
        """The function that runs continuation `code` of `version` on `namespace`, sharing `cells`."""
        function: Any = make_function(code, self.function.__globals__, cells, resume_point)
        receiver = version.scope.receiver
        if receiver is not None:  # zero-argument `super()` reads the continuation's first parameter
            held = cells.get(receiver)
            function = partial(function, namespace.get(receiver) if held is None else _contents(held))
        return function

    # -- progress ---------------------------------------------------------------------------

    def _fingerprint(self, site: Site, namespace: dict[str, Any]) -> dict[str, int]:
        """Which object each local (but those the statement itself binds) holds: equal fingerprints
        (a dict compares without regard to order) mean no local was rebound."""
        node = site.node
        own = self._bound.get(node)
        if own is None:  # the names a statement binds never change: found once per statement
            own = bound_names(node.target, imports=False) if site.header and _kind(node) == "for" else set()
            if not site.header:
                own = bound_names(node, imports=False)
            self._bound[node] = own
        return {k: id(v) for k, v in namespace.items() if k not in own and not k.startswith("@")}

    def _previous(self, site: Site, namespace: dict[str, Any]) -> _Progress | None:
        """The last repair at this site, if the run made no progress since: else `None`.

        No progress: no local variable (other than those the statement itself binds) was rebound
        since that repair — the loop did not move on. `crash.attempt` counts such repairs.
        """
        previous = namespace["@call"].progress.get(site.path)
        if previous is not None and previous.fingerprint == self._fingerprint(site, namespace):
            return previous
        return None

    def _remember(self, version: Version, path: Path, site: Site, namespace: dict[str, Any], crash: Crash) -> None:
        """Note the repair about to resume, so a repeat of this crash knows what was tried."""
        progress = namespace["@call"].progress
        progress.pop(site.path, None)
        fingerprint = self._fingerprint(Site(version, path, site.header), namespace) if _has(version, path) else {}
        progress[path] = _Progress(fingerprint, crash.attempt, crash.tried)


def _running_trial() -> Any:
    """`daifu.core.trial` when this process runs a trial (a fork trial's copy, an in-process trial), else
    `None`. Read from its state, not asked: a process that never tried a repair has not imported it, and
    the warm thread (`daifu.decide.warm`) may be importing it as the program crashes — a module half
    imported has no `active` yet, and asking it would raise DaiFu's error in place of the crash."""
    module = sys.modules.get("daifu.core.trial")
    return module if getattr(module, "_CHILD", None) else None


def _releasing(error: BaseException) -> Callable[[], None] | None:
    """For a crash that ran out of memory, what lets go of the memory it left held once the run
    resumes (`daifu.core.cuda.release`); `None` for any other."""
    from daifu.core import cuda

    if not cuda.out_of_memory(error):
        return None
    return partial(cuda.release, error)


def _def_lines(fdef: ast.FunctionDef) -> tuple[int, ...]:
    """Where a function's definition starts: its decorators' lines and its `def` line."""
    return (*(decorator.lineno for decorator in fdef.decorator_list), fdef.lineno)


def _statement_reload(node: ast.stmt, raised: tuple[BaseException, FrameType | None],
                      namespace: dict[str, Any]) -> Reload | None:
    """The batch a torch DataLoader's iterator failed to make for a statement that takes it with `next`
    (`batch = next(data_iter)`, minGPT's loop), run again: given back, the statement gets that batch, not the
    one after it. Only a statement with one call of the builtin `next`, on a local holding that very
    iterator: a second `next` on it would take the batch given back first. `None` otherwise (the retry
    goes on as before, asking the iterator for its next item)."""
    from daifu.core.refetch import Reload, from_a_loader, reload

    error, frame = raised
    if frame is None or not from_a_loader(error, frame):  # every other retry, on the restore path: no tree walk
        return None
    calls = [n for n in ast.walk(node)
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "next"]
    if len(calls) != 1 or not calls[0].args or not isinstance(calls[0].args[0], ast.Name):
        return None
    if "next" in namespace or frame.f_globals.get("next", next) is not next:
        return None  # the program's own `next`
    iterator = namespace.get(calls[0].args[0].id)
    try:
        found = reload(error, frame, iterator)
    except Exception:  # noqa: BLE001 - never costs the repair: the retry asks for the next batch, as before
        return None
    return found if isinstance(found, Reload) and found.loader is iterator else None


def _loop_iterator(site: Site, namespace: dict[str, Any]) -> Any:
    """The iterator of the `for` loop whose header raised at `site` (`None`: not a `for` header, or no
    iterator made yet): the one a retry asks for its next item."""
    if not (site.header and _kind(site.node) == "for"):
        return None
    fdef, path = site.version.fdef, site.path
    depth = sum(path[i] == "body" and _kind(node_at(fdef, path[:i])) == "for" for i in range(1, len(path), 2))
    return namespace.get(f"@it{depth}")


def _loop_goes_on(site: Site, mode: Mode, namespace: dict[str, Any]) -> None:
    """Refuse to ask a loop's iterator for its next item when it is (or asks) a generator that finished
    when it raised: the loop would end at once, passing over all it had left (`daifu.core.iterators`)."""
    if mode is Mode.LOOP_NEXT and finished_generator(_loop_iterator(site, namespace)):
        raise RepairRefused("the loop's iterator is (or reads from) a generator that ended when it raised: asking "
                            "it for its next item would end the loop, passing over all it had left")


def _compiles(version: Version) -> None:
    """Compile `version` as written, if it was not: `RepairRefused` when it does not compile."""
    try:
        version.plain_code  # noqa: B018 - compiled now, to be refused now
    except SyntaxError as error:
        raise RepairRefused(_not_compiling(error)) from None


def _not_compiling(error: SyntaxError) -> str:
    where = f"line {error.lineno}: " if error.lineno else ""
    return f"the new source does not compile: {where}{error.msg}"


@contextmanager
def _collection_paused() -> Iterator[None]:
    """No garbage collection inside: a full one costs ~0.2 s once torch is loaded."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _contents(cell: CellType) -> Any:
    """What `cell` holds; `None` if it is empty."""
    try:
        return cell.cell_contents
    except ValueError:
        return None


def _kind(node: Any) -> str:
    """`for`, `while`, `if`, `with` or `match` for a compound statement; else `statement`."""
    name = type(node).__name__
    return name.lower() if name in ("For", "While", "If", "With", "Match") else "statement"


def _has(version: Version, path: Path) -> bool:
    try:
        node_at(version.fdef, path)
    except (IndexError, KeyError):
        return False
    return True
