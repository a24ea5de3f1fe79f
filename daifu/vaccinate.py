"""`transform`: the decorator that vaccinates a function; where the runtime meets the layers above.

The function object is vaccinated *in place*: it keeps its identity, name, docstring, defaults,
signature and closure, and gets the vaccinated code (`function.__code__`), as live-update tools
do. Every reference to it — a decorator's wrapper below `@daifu.transform` (`functools.wraps`
wrappers, `torch.no_grad()`, `functools.lru_cache`...), a method's descriptor, a registry — runs
the vaccinated code, and the decorators keep doing what they did.

`@daifu.transform(globals())`, the prototype's form, gives the function the prototype's scope
model (its variables are module globals, see `daifu.core.seedscope`): the function object then
gets a wrapper's code that enters that scope and calls the vaccinated body.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import warnings
from collections.abc import Callable, Sequence
from types import FrameType, FunctionType
from typing import TYPE_CHECKING, Any, TypeVar, overload

from daifu import config
from daifu.core import seedscope
from daifu.core.compiling import compile_definition, future_flags, qualified
from daifu.core.handling import RepairContext, RepairEntry
from daifu.core.resume import Vaccine
from daifu.core.source import SourceUnavailable, function_source
from daifu.store import record

if TYPE_CHECKING:
    from daifu.core.account import Account, Firing
    from daifu.core.crash import Crash
    from daifu.core.decisions import Decision
    from daifu.decide.candidates import Candidate

F = TypeVar("F", bound=Callable[..., Any])


class _Terminal:
    """The person at this process's terminal, as the decision layer asks them (`daifu.decide.contract.Person`):
    the console and its approval prompt, loaded only when one opens (pdb is not needed otherwise)."""

    def present(self) -> bool:
        stdin = sys.stdin
        return bool(stdin is not None and stdin.isatty())

    def console(self, crash: Crash, context: RepairContext) -> Decision | None:
        from daifu.console import session

        return session.open_console(crash, context)

    def approve(self, crash: Crash, context: RepairContext, diagnosis: str,
                options: Sequence[Candidate]) -> Decision | None:
        from daifu.console import approval

        return approval.approve(crash, context, diagnosis, options)


class _Handling:
    """The runtime's view of the layers above it (`daifu.core.handling.Handling`): the settings, the
    decision chain with the person at the terminal, and the record."""

    def settings(self) -> config.Settings:
        return config.settings()

    def decide(self, crash: Crash, context: RepairContext) -> tuple[Decision, str]:
        from daifu.decide import chain  # the decision layer loads at the first crash, not with the decorator

        return chain.decide(crash, context, TERMINAL)

    def begin(self, crash: Crash, settings: config.Settings) -> RepairEntry:
        return record.begin(crash, settings)

    def note(self, text: str) -> None:
        record.note(text)

    def unrepaired(self, crash: Crash) -> None:
        settings = config.settings()
        if not settings.rescue:
            return
        from daifu.rescue import save  # loaded by the first crash nothing repairs

        where = save.after_crash(crash, record.current_number(), settings)
        if where is not None:
            record.note(f"{crash.exception_type} in {crash.qualname} not repaired: its trained state is rescued "
                        f"in {where}")

    def passed_over(self, account: Account, firing: Firing, entry: RepairEntry | None) -> str | None:
        from daifu.decide import watch

        return watch.passed_over(account, firing, entry)


TERMINAL = _Terminal()
HANDLING = _Handling()


@overload
def transform(target: F) -> F: ...
@overload
def transform(target: dict[str, Any] | None = None) -> Callable[[F], F]: ...


def transform(target: Any = None) -> Any:
    """Vaccinate a function: a crash inside it is caught in place and can be repaired and resumed.

    Usable as `@daifu.transform` and `@daifu.transform()` (the function keeps ordinary local
    variables), and as the prototype's `@daifu.transform(globals())`, which keeps the prototype's
    scope model: the function's variables are its module's globals (`daifu.core.seedscope`). The
    dict must be the function's own module globals (`TypeError` otherwise).
    Works on functions, methods, static and class methods, properties, and functions under other
    decorators that say what they wrap (`functools.wraps`, `torch.no_grad()`, `lru_cache`...).
    Generator and async functions raise `TypeError`. A function whose source cannot be read runs
    unvaccinated, with a warning. Returns `target` itself, vaccinated.
    """
    if target is None or isinstance(target, dict):
        module = target

        def decorate(function: F) -> F:
            return _vaccinate(function, sys._getframe(1), module)  # type: ignore[no-any-return]

        return decorate
    return _vaccinate(target, sys._getframe(1))


def _vaccinate(target: Any, caller: FrameType, module: dict[str, Any] | None = None) -> Any:
    if isinstance(target, (staticmethod, classmethod)):
        _vaccinate(target.__func__, caller, module)
        return target
    if isinstance(target, property):
        if target.fget is not None:
            _vaccinate(target.fget, caller, module)
        return target
    inner = _innermost(target, caller)
    if inner is None:
        warnings.warn(f"daifu.transform: {target!r} is not a plain function; left unvaccinated", RuntimeWarning, 3)
        return target
    if module is not None and module is not inner.__globals__:
        raise TypeError(
            f"daifu.transform(globals()) on {inner.__qualname__!r}: the dict given must be the globals of the "
            f"module that defines it ({inner.__module__!r}); call globals() in that module, or use "
            "@daifu.transform for ordinary local variables"
        )
    if getattr(inner, "__daifu__", None) is not None:
        return target
    if inspect.isgeneratorfunction(inner) or inspect.iscoroutinefunction(inner) or inspect.isasyncgenfunction(inner):
        what = "a generator" if inspect.isgeneratorfunction(inner) else "an async"
        raise TypeError(
            f"daifu.transform cannot vaccinate {inner.__qualname__!r}: it is {what} function, and DaiFu "
            "resumes only plain functions; vaccinate the function that drives it instead"
        )
    if config.settings().mode == "off":
        return target
    try:
        source, first_lineno = function_source(inner)
    except SourceUnavailable as why:
        warnings.warn(
            f"daifu.transform: the source of {inner.__qualname__!r} cannot be read ({why}); it runs unvaccinated",
            RuntimeWarning,
            3,
        )
        return target
    if module is not None and "__class__" in inner.__code__.co_freevars:
        warnings.warn(
            f"daifu.transform(globals()): {inner.__qualname__!r} calls zero-argument super(), which needs its "
            "arguments as locals; it is vaccinated with ordinary local variables (as @daifu.transform). "
            "Write super(Class, self) to keep the prototype's scope model.",
            RuntimeWarning,
            3,
        )
        module = None
    try:
        if module is None:
            vaccine = Vaccine(inner, source, first_lineno, HANDLING)
        else:
            vaccine = _seed_vaccine(inner, source, first_lineno)
    except Exception as error:  # fail open: never break the user's import
        warnings.warn(
            f"daifu.transform could not vaccinate {inner.__qualname__!r} ({error!r}); it runs unvaccinated",
            RuntimeWarning,
            3,
        )
        return target
    inner.__daifu__ = vaccine  # type: ignore[attr-defined]
    record.program_begin()
    _load_crash_path()
    _arm_signals()
    _warm_decision_layer()
    return target


def _arm_signals() -> None:
    """Install the handlers of the `rescue_on` signals now, and again whenever `configure()` changes
    them; `daifu.rescue.signals` loads only for a program that asks for them."""
    if config.settings().rescue_on or "daifu.rescue.signals" in sys.modules:
        from daifu.rescue import signals

        signals.arm()
    config.watch(_arm_signals)


def _warm_decision_layer() -> None:
    """Load what automatic mode decides a crash with in the background (`daifu.decide.warm`), now if the
    settings ask for it, else when `configure()` changes them to."""
    from daifu.decide import warm

    warm.start()
    config.watch(warm.start)


_CRASH_PATH = (
    "daifu.core.crash", "daifu.core.decisions", "daifu.core.kinds", "daifu.core.actions", "daifu.core.surgery",
    "daifu.core.patch", "daifu.decide.chain", "daifu.report.redact", "daifu.store.repairs",
)  # fmt: skip
"""What every repair goes through. `import daifu` leaves it alone (a tool that only imports DaiFu pays
nothing); the first vaccination loads it, so that the first crash does not pay for it in its restore
time. Trials (`daifu.core.trial`, multiprocessing) and the bot client still load only when used."""

_MODE_PATH = {"replay": ("daifu.decide.replay",)}
"""What the repairs of a mode go through besides, loaded with `_CRASH_PATH` when that mode is set."""

_warmed: set[str] = set()


def _load_crash_path() -> None:
    mode = config.settings().mode
    if mode in _warmed:
        return
    for name in _CRASH_PATH + _MODE_PATH.get(mode, ()):
        if name not in sys.modules:
            importlib.import_module(name)
    from daifu.report import redact

    redact.secret_environment()  # compiles the pattern of secret names every record line is redacted with
    _warmed.add(mode)


def _seed_vaccine(function: FunctionType, source: str, first_lineno: int) -> Vaccine:
    """Vaccinate `function` under the prototype's scope model (`daifu.core.seedscope`).

    The runtime vaccinates a body function made for it (same code, globals and closure to begin
    with; the vaccinated body replaces its code); `function` itself gets the code of a wrapper with
    its own signature and closure, which enters the scope, calls the body and leaves the scope.
    """
    code = function.__code__
    body = FunctionType(code, function.__globals__, code.co_name, function.__defaults__, function.__closure__)
    body.__kwdefaults__, body.__qualname__ = function.__kwdefaults__, function.__qualname__
    scope = seedscope.SeedScope(function.__globals__, seedscope.SeedNames(()))
    vaccine = Vaccine(body, source, first_lineno, HANDLING, seed=scope)
    scope.body = body
    wrapper = seedscope.wrapper_definition(vaccine.current.fdef, code.co_freevars)
    wrapper_code = compile_definition(wrapper, code.co_filename, future_flags(code), code.co_freevars, scope)
    function.__code__ = qualified(wrapper_code, function.__qualname__)
    return vaccine


def _innermost(target: Any, caller: FrameType) -> FunctionType | None:
    """The function whose code to vaccinate: under the wrappers that name it (`__wrapped__`).

    A wrapper that does not name it (a decorator without `functools.wraps`) is seen through when
    the function it closes over is the one being decorated here, with a warning naming both.
    """
    try:
        inner = inspect.unwrap(target)
    except ValueError:  # a cycle of __wrapped__
        return None
    if not isinstance(inner, FunctionType):
        return None
    hidden = [c.cell_contents for c in inner.__closure__ or () if _holds_function(c)]
    if len(hidden) == 1 and _decorated_here(hidden[0], caller) and not _decorated_here(inner, caller):
        warnings.warn(
            f"daifu.transform: {inner.__qualname__!r} is a decorator's wrapper around {hidden[0].__qualname__!r} "
            "that does not say what it wraps (no functools.wraps); DaiFu vaccinates "
            f"{hidden[0].__qualname__!r} itself. Put @daifu.transform just above the def, or use "
            "functools.wraps in that decorator, to silence this.",
            RuntimeWarning,
            4,
        )
        return _innermost(hidden[0], caller)
    return inner


def _holds_function(cell: Any) -> bool:
    try:
        return isinstance(cell.cell_contents, FunctionType)
    except ValueError:  # an empty cell
        return False


def _decorated_here(function: FunctionType, caller: FrameType) -> bool:
    """Whether `caller` is applying decorators to `function`: it runs one of its source lines."""
    code = function.__code__
    if code.co_filename != caller.f_code.co_filename:
        return False
    try:
        lines, first = inspect.getsourcelines(function)
    except (OSError, TypeError):
        return False
    return first <= caller.f_lineno < first + len(lines)
