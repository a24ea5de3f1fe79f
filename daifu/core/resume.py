"""The runtime of a vaccinated function: where a crash is intercepted and where the run resumes.

`Vaccine.crash` is called by the generated catchers, inside the frame that crashed. It finds the
faulty statement, asks for a decision, and either returns (the catcher then re-raises the
original exception untouched) or raises a `Handover` carrying a continuation and a snapshot of
the frame's locals. The frame unwinds without running the user's `finally` clauses or `with`
exits, and its function-level catcher calls `Vaccine.resume`, which runs the continuation — and
any further continuations, one after the other, so the stack does not grow with each crash.
"""

from __future__ import annotations

import builtins
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from types import CellType, CodeType, FrameType, FunctionType, MappingProxyType
from typing import Any
from collections.abc import Callable

from daifu import config
from daifu.store import record
from daifu.core.blocks import Path, assigned_names, locate, node_at, path_of
from daifu.core.compiling import future_flags, make_function, compile_definition
from daifu.core.crash import Crash
from daifu.decide.chain import decide
from daifu.core.decisions import Action, Decision, Raise, Retry, Skip, Surgery
from daifu.core.guard import Guard, Handover, is_passed, mark_passed
from daifu.core.locate import raising_position
from daifu.core.rewrite import CannotResume, Mode
from daifu.core.surgery import SurgeryRefused, check_same_signature, resume_path
from daifu.core.version import Version, build_version


class RepairRefused(Exception):
    """A decision that cannot be carried out; the crash is offered again, state untouched."""


@dataclass(frozen=True)
class Site:
    """The faulty statement of a crash: its version, path, and whether its header raised."""

    version: Version
    path: Path
    header: bool

    @property
    def node(self) -> Any:
        return node_at(self.version.fdef, self.path)


@dataclass
class _Progress:
    """The last repair at a site: the locals it resumed with, its attempt number, what was tried."""

    fingerprint: tuple[tuple[str, int], ...]
    attempt: int
    tried: list[tuple[str, str]]


class _Invocation:
    """One call of the vaccinated function, carried from continuation to continuation as `@call`.

    It holds the repair count of each site, so a new call starts afresh.
    """

    __slots__ = ("progress",)

    def __init__(self) -> None:
        self.progress: dict[Path, _Progress] = {}


def _user_view(namespace: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in namespace.items() if not name.startswith("@")}


_TEMPORARIES = ("@e", "@h", "@k", "@ns", "@once", "@pending")


class Vaccine:
    """Everything DaiFu keeps about one vaccinated function; its generated code's `@rt`.

    versions: every source the function has had; the last one runs on later calls.
    units: which version each compiled code object (fast path or continuation) belongs to, by id;
        every such code object is kept alive by its version or the continuation cache.
    """

    Handover = Handover
    Exception = Exception
    iter = staticmethod(builtins.iter)
    isinstance = staticmethod(builtins.isinstance)
    guard = Guard

    def __init__(self, original: FunctionType, source: str, first_lineno: int) -> None:
        code = original.__code__
        self.original = original
        self.name = code.co_name
        self.qualname = original.__qualname__
        self.filename = code.co_filename
        self.flags = future_flags(code)
        self.free_names = code.co_freevars
        self.cells = dict(zip(code.co_freevars, original.__closure__ or ()))
        self.cells["@rt"] = CellType(self)
        self._lock = threading.RLock()
        self._continuations: dict[tuple[int, Path, Mode], CodeType] = {}
        self.units: dict[int, Version] = {}  # by id: hashing a code object hashes all its bytecode
        self.versions: list[Version] = []
        self.function: FunctionType = self._adopt(self._build(source, first_lineno))

    # -- versions ---------------------------------------------------------------------------

    def _build(self, source: str, first_lineno: int) -> Version:
        version = build_version(len(self.versions), source, first_lineno, self.filename, self.flags, self.free_names)
        self.versions.append(version)
        self.units[id(version.fast_code)] = version
        return version

    def _adopt(self, version: Version) -> FunctionType:
        """The callable for `version`; after the first, the same function object gets the new code."""
        code = version.fast_code
        if sys.version_info >= (3, 11):
            code = code.replace(co_qualname=self.qualname)
        self.units[id(code)] = version
        if self.versions[0] is version:
            return make_function(code, self.original.__globals__, self.cells, self.original.__defaults__)
        self.function.__code__ = code
        return self.function

    @property
    def current(self) -> Version:
        return self.versions[-1]

    # -- the crash --------------------------------------------------------------------------

    def crash(self, error: BaseException, cells: Callable[[], Any] | None = None) -> None:
        """Called by a catcher. Returns to let `error` propagate; raises `Handover` to resume."""
        if is_passed(error):
            return
        crashed_at = time.perf_counter()
        frame = sys._getframe(1)
        try:
            site = self._site(error, frame)
            if site is None:
                mark_passed(error)
                return
            namespace = {k: v for k, v in dict(frame.f_locals).items() if k not in _TEMPORARIES}
            namespace.setdefault("@call", _Invocation())
            closure = dict(zip(cells.__code__.co_freevars, cells.__closure__ or ())) if cells else {}
            handover = self._repair(error, frame, site, namespace, closure, crashed_at)
        except Handover:
            raise
        except Exception as internal:  # a bug of ours must never hide the user's exception
            warnings.warn(f"DaiFu could not handle the crash in {self.qualname}: {internal!r}", RuntimeWarning, 2)
            handover = None
        if handover is None:
            mark_passed(error)
            return
        raise handover

    def _site(self, error: BaseException, frame: FrameType) -> Site | None:
        version = self.units.get(id(frame.f_code))
        position = raising_position(error, frame) if version is not None else None
        if version is None or position is None:
            return None
        found = locate(version.fdef.body, *position)
        if found is None:
            return None
        node, header = found
        return Site(version, path_of(node), header)

    def _describe(self, error: BaseException, frame: FrameType, site: Site, namespace: dict[str, Any]) -> Crash:
        node = site.node
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
            locals=MappingProxyType(_user_view(namespace)),
            attempt=1,
            frame=frame,
            check=lambda decision: self.check(decision, site),
        )
        previous = self._previous(site, namespace)
        if previous is not None:
            crash.attempt, crash.tried = previous.attempt + 1, list(previous.tried)
        return crash

    def _repair(
        self,
        error: BaseException,
        frame: FrameType,
        site: Site,
        namespace: dict[str, Any],
        cells: dict[str, CellType],
        crashed_at: float,
    ) -> Handover | None:
        """Ask for decisions until one can be carried out; `None` means give up (Raise)."""
        crash = self._describe(error, frame, site, namespace)
        settings = config.settings()
        if crash.attempt > settings.max_attempts:
            attempts = crash.attempt - 1
            record.note(f"{self.qualname}: {attempts} repairs at line {crash.lineno} made no progress; raising")
            return None
        entry = record.begin(crash)
        for _offer in range(settings.max_attempts + 1):
            decision, decided_by = decide(crash, settings)
            if crash.edited_locals is not None:
                edited = {k: v for k, v in dict(crash.edited_locals).items() if k not in _TEMPORARIES}
                namespace = {**edited, "@call": namespace["@call"]}
            if isinstance(decision, Raise):
                entry.failed(decided_by)
                return None
            try:
                handover = self._prepare(decision, crash, site, dict(namespace), cells)
            except RepairRefused as refusal:
                crash.tried.append((repr(decision), f"refused: {refusal}"))
                entry.refused(decision, decided_by, str(refusal))
                continue
            entry.decided(decision, decided_by)
            if all(tried[0] != repr(decision) for tried in crash.tried):
                crash.tried.append((repr(decision), f"applied ({decided_by})"))  # a repeat of this crash will say so
            handover.started = crashed_at
            handover.entry = entry
            return handover
        entry.failed("refusals")
        return None

    # -- carrying out a decision ------------------------------------------------------------

    def _prepare(
        self, decision: Decision, crash: Crash, site: Site, namespace: dict[str, Any], cells: dict[str, CellType]
    ) -> Handover:
        version, path, mode = site.version, site.path, self._retry_mode(site, namespace)
        if isinstance(decision, Skip):
            mode = self._skip_mode(site)
        elif isinstance(decision, Action):
            self._run_action(decision.code, namespace, crash.frame)
        elif isinstance(decision, Surgery):
            version, path, mode = self._operate(decision.source, site, namespace)
        elif not isinstance(decision, Retry):
            raise RepairRefused(f"{decision!r} is not a DaiFu decision")
        try:
            code = self._continuation(version, path, mode)
        except CannotResume as reason:
            raise RepairRefused(str(reason)) from None
        for name, cell in cells.items():  # a closure variable rebound by an action or the console
            if name in namespace:
                cell.cell_contents = namespace[name]
        self._remember(version, path, site, namespace, crash)
        function = make_function(code, self.original.__globals__, {**cells, "@rt": self.cells["@rt"]})
        for name in code.co_freevars:
            if name not in cells and name != "@rt" and name in namespace:
                function.__closure__[code.co_freevars.index(name)].cell_contents = namespace[name]
        return Handover(function, namespace)

    def _retry_mode(self, site: Site, namespace: dict[str, Any]) -> Mode:
        node = site.node
        if site.header and _kind(node) == "for":
            fdef, path = site.version.fdef, site.path
            depth = sum(path[i] == "body" and _kind(node_at(fdef, path[:i])) == "for" for i in range(1, len(path), 2))
            if namespace.get(f"@it{depth}") is not None:
                return Mode.LOOP_NEXT
        return Mode.AT

    def _skip_mode(self, site: Site) -> Mode:
        if site.header and _kind(site.node) in ("for", "while"):
            return Mode.LOOP_EXHAUSTED
        return Mode.AFTER

    def _run_action(self, code: str, namespace: dict[str, Any], frame: FrameType) -> None:
        """Run action code on the snapshot; names that are not locals of the function become globals."""
        try:
            compiled = compile(code, "<daifu action>", "exec")
        except SyntaxError as error:
            raise RepairRefused(f"the action does not parse: line {error.lineno}: {error.msg}") from None
        scratch = dict(namespace)
        try:
            exec(compiled, frame.f_globals, scratch)
        except Exception as error:
            raise RepairRefused(f"the action raised {type(error).__name__}: {error}") from None
        local_names = set(self.current.scope.plain_locals) | set(self.current.scope.cell_names)
        for name in list(namespace):
            if name not in scratch:
                del namespace[name]
        for name, value in scratch.items():
            if name in local_names or name in namespace:
                namespace[name] = value
            elif not name.startswith("__"):
                frame.f_globals[name] = value

    def _operate(self, source: str, site: Site, namespace: dict[str, Any]) -> tuple[Version, Path, Mode]:
        """Validate and install a new source; where in it the run resumes."""
        with self._lock:
            new, path, same = self._examine(source, site)
            self.versions.append(new)
            self.units[id(new.fast_code)] = new
            self._adopt(new)
        if same:
            return new, path, self._retry_mode(Site(new, path, site.header), namespace)
        return new, path, Mode.AT

    def _examine(self, source: str, site: Site) -> tuple[Version, Path, bool]:
        """Build a new source without installing it; `RepairRefused` says why it cannot be."""
        old = site.version
        try:
            new = build_version(
                len(self.versions), source, old.first_lineno, self.filename, self.flags, self.free_names
            )
        except SyntaxError as error:
            where = f"line {error.lineno}: " if error.lineno else ""
            raise RepairRefused(f"the new source does not compile: {where}{error.msg}") from None
        except ValueError as error:
            raise RepairRefused(f"the new source is refused: {error}") from None
        try:
            check_same_signature(old.fdef, new.fdef)
            path, same = resume_path(old, new, site.path)
            new.rewriter.continuation(new.fdef, path, Mode.AT)
        except (SurgeryRefused, CannotResume) as refusal:
            raise RepairRefused(str(refusal)) from None
        return new, path, same

    def check(self, decision: Decision, site: Site) -> str | None:
        """Why `decision` would be refused at `site`, or `None`; changes nothing (a dry run)."""
        try:
            if isinstance(decision, Surgery):
                self._examine(decision.source, site)
            elif isinstance(decision, Action):
                compile(decision.code, "<daifu action>", "exec")
        except RepairRefused as refusal:
            return str(refusal)
        except SyntaxError as error:
            return f"the action does not parse: line {error.lineno}: {error.msg}"
        return None

    def _continuation(self, version: Version, path: Path, mode: Mode) -> CodeType:
        key = (version.number, path, mode)
        code = self._continuations.get(key)
        if code is None:
            tree = version.rewriter.continuation(version.fdef, path, mode)
            free = ("@rt",) + tuple(sorted(set(version.scope.cell_names)))
            code = compile_definition(tree, self.filename, self.flags, free)
            if sys.version_info >= (3, 11):
                code = code.replace(co_qualname=self.qualname)
            self._continuations[key] = code
            self.units[id(code)] = version
        return code

    # -- progress ---------------------------------------------------------------------------

    def _fingerprint(self, site: Site, namespace: dict[str, Any]) -> tuple[tuple[str, int], ...]:
        node = site.node
        own = assigned_names(node.target) if site.header and _kind(node) == "for" else set()
        if not site.header:
            own = assigned_names(node)
        return tuple(sorted((k, id(v)) for k, v in _user_view(namespace).items() if k not in own))

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
        fingerprint = self._fingerprint(Site(version, path, site.header), namespace) if _has(version, path) else ()
        progress[path] = _Progress(fingerprint, crash.attempt, crash.tried)

    # -- resuming ---------------------------------------------------------------------------

    def resume(self, handover: Handover) -> Any:
        """Run continuations until one finishes the invocation; return what it returns."""
        while True:
            handover.__context__ = handover.__traceback__ = None
            continuation, namespace = handover.continuation, handover.namespace
            handover.namespace = {}
            if handover.entry is not None:
                handover.entry.resumed(time.perf_counter() - handover.started)
            result = continuation(namespace)
            if type(result) is not Handover:
                return result
            handover = result


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
