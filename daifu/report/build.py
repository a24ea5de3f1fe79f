"""The crash report: what the repair bot, the console's `report` command and the record see.

A report is plain data (the wire models of `repairbot.protocol`), built from a `Crash` without
running user code beyond the summaries of `daifu.report.summary`, bounded in size, and free of secrets:
variables with secret-looking names are redacted, and every text it carries — values, exception
messages, source code and code lines — goes through `daifu.report.redact`; of the process's environment it
holds only versions.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import os
import platform
import sys
import sysconfig
import traceback
from types import CodeType, FrameType
from typing import Any, Literal
from collections.abc import Iterator

from daifu.core.crash import Crash
from repairbot.protocol import (
    Attempt,
    ChainedException,
    CrashReport,
    Device,
    Environment,
    ExceptionInfo,
    Frame,
    FunctionInfo,
    Variable,
    fingerprint,
)
from daifu.core.bounded import budget, describe
from daifu.report.lookups import lookups
from daifu.report.operands import operands
from daifu.report.redact import known_secrets, redact, scrub, secret_environment, secret_values
from daifu.report.summary import Summary, summarize_namespace, truncate

MAX_REPORT_BYTES = 256 * 1024
DESCRIBE_SECONDS = 5.0
"""The time all the user code a report runs (`repr`, `str`, `len` of live values) may take together:
past it, the values not yet described are `<repr timed out>`, so a crash is never held for longer."""
_MAX_CAUSES = 5
_MAX_MESSAGE = 4000
_MAX_CALLEE_SOURCE = 8000
_MAX_NAME = 200


def function_info(crash: Crash) -> FunctionInfo:
    """The vaccinated function's part of a report: where it is and what crashed in it."""
    return FunctionInfo(
        name=crash.function_name,
        qualname=crash.qualname,
        source=crash.source,
        filename=crash.filename,
        first_lineno=crash.first_lineno,
        lineno=crash.lineno,
        statement=crash.statement,
        kind=crash.kind,
    )


def build_report(crash: Crash) -> CrashReport:
    """The report of `crash`, bounded to `MAX_REPORT_BYTES` of JSON, with no secret the crash holds.

    The live values are summarised once (a user's `__repr__` may be slow) and shared by the
    report's variables and its first frame; all the user code that describing them runs gets
    `DESCRIBE_SECONDS` together, each call abandoned at its own deadline (`daifu.core.bounded`).
    The crash's secrets are known before any text is made (`known_secrets`), so each text is redacted
    of them, in every form, before it is cut to its bound; the whole report is scrubbed once more.
    """
    secrets = _secrets_of(crash)
    with known_secrets(secrets):
        with budget(DESCRIBE_SECONDS):
            summaries = _variables(summarize_namespace(crash.locals))
            exception = _exception_info(crash.exception)
            frames = _frames(crash, summaries)
            evaluated = operands(crash, is_library)
            failed = lookups(crash, _user_callees(crash))
        report = CrashReport(
            exception=exception,
            function=_shown(function_info(crash)),
            frames=frames,
            variables=summaries,
            environment=environment(),
            tried=[
                Attempt(decision=truncate(redact(d), 2000), outcome=truncate(redact(o), 500)) for d, o in crash.tried
            ],
            attempt=crash.attempt,
            operands=evaluated,
            lookups=failed,
        )
    return bound(_scrubbed(report, secrets))


def _secrets_of(crash: Crash) -> set[str]:
    """The strings the crash marks as secret (`daifu.redact.secret_values`) in every user frame, and the
    values of secret environment variables: redacted from the whole report once (`_scrubbed`)."""
    frames = [frame for frame, _ in traceback.walk_tb(crash.exception.__traceback__)]
    library = {name: is_library(name) for name in {f.f_code.co_filename for f in frames}}
    user = [f for f in frames if not library[f.f_code.co_filename]]
    sources = [crash.source]
    for code in dict.fromkeys(f.f_code for f in user):  # each function once, however deep the recursion
        found = _source_of(code)
        if found is not None:
            sources.append(found)
    return secret_values([crash.locals, *(f.f_locals for f in user)], sources) | secret_environment()


@functools.lru_cache(maxsize=64)
def _source_of(code: CodeType) -> str | None:
    """The source of the function running `code`, bounded; `None` when it cannot be read. Kept per code
    object (a surgery makes a new one): `inspect` tokenizes the file to find where the function ends,
    the larger part of a repeated crash's report."""
    try:
        return "".join(inspect.getsourcelines(code)[0])[:_MAX_CALLEE_SOURCE]
    except (OSError, TypeError):
        return None


def _scrubbed(report: CrashReport, secrets: set[str]) -> CrashReport:
    """`report` with each of `secrets` redacted from every text in it, wherever it appears."""
    if not secrets:
        return report

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return scrub(value, secrets)
        if isinstance(value, list):
            return [walk(item) for item in value]
        if isinstance(value, dict):
            return {key: walk(item) for key, item in value.items()}
        return value

    return CrashReport.model_validate(walk(report.model_dump()))


def _shown(function: FunctionInfo) -> FunctionInfo:
    """The function as a report shows it: secrets in its source redacted, its lines where they were."""
    return function.model_copy(
        update={"source": redact(function.source, code=True), "statement": redact(function.statement, code=True)}
    )


def environment() -> Environment:
    """Python, PyTorch and CUDA versions, each GPU's free memory, and whether gradient tracking is on in
    this thread (the crash's: the report is built where it was caught), if PyTorch is loaded."""
    env = Environment(python=platform.python_version(), platform=platform_name())
    torch = sys.modules.get("torch")
    if torch is None:
        return env
    env.torch = str(torch.__version__)
    env.cuda = torch.version.cuda
    env.grad_enabled = bool(torch.is_grad_enabled())
    try:
        if torch.cuda.is_available():
            env.devices = [_device(torch, index) for index in range(torch.cuda.device_count())]
    except Exception:  # a broken driver must not cost the report
        pass
    return env


def prime() -> None:
    """Read now what every report reads once per process (the platform, the library folders), so that
    the first crash does not: automatic mode's loading ahead of it calls this (`daifu.decide.warm`)."""
    platform_name()
    _library_roots()


@functools.cache
def platform_name() -> str:
    """`platform.platform()`, read once per process: it reads the C library's version out of the
    interpreter's own binary, 10 ms or more of a crash's time to resume, and it does not change."""
    return platform.platform()


def _device(torch: Any, index: int) -> Device:
    device = Device(index=index, name=torch.cuda.get_device_name(index))
    device.free_bytes, device.total_bytes = torch.cuda.mem_get_info(index)
    return device


def _exception_info(error: BaseException) -> ExceptionInfo:
    return ExceptionInfo(
        type=_class_name(error), module=_module_name(error), message=_message(error), chain=list(_chain(error))
    )


def _class_name(error: BaseException) -> str:
    """The exception's class name, redacted and bounded: code can make a class of any name."""
    return truncate(redact(str(type(error).__qualname__)), _MAX_NAME)


def _module_name(error: BaseException) -> str:
    return truncate(redact(str(type(error).__module__)), _MAX_NAME)


def _message(error: BaseException) -> str:
    try:
        return truncate(redact(describe(error, str)[: 4 * _MAX_MESSAGE]), _MAX_MESSAGE)
    except Exception:
        return "<str() of the exception failed>"


def _chain(error: BaseException) -> Iterator[ChainedException]:
    """The causes and contexts of `error`, as Python prints them, stopping at a cycle."""
    seen = {id(error)}
    current: BaseException | None = error
    relation: Literal["cause", "context"]
    for _ in range(_MAX_CAUSES):
        if current is None:
            return
        if current.__cause__ is not None:
            nxt, relation = current.__cause__, "cause"
        elif current.__context__ is not None and not current.__suppress_context__:
            nxt, relation = current.__context__, "context"
        else:
            return
        if id(nxt) in seen:
            return
        seen.add(id(nxt))
        yield ChainedException(relation=relation, type=_class_name(nxt), message=_message(nxt))
        current = nxt


def _frames(crash: Crash, summaries: dict[str, Variable]) -> list[Frame]:
    entries = list(traceback.walk_tb(crash.exception.__traceback__))
    start = _start_index(entries, crash)
    frames = []
    for position, (frame, lineno) in enumerate(entries[start:]):
        if position == 0:
            first = _frame(frame, crash.lineno, {}, callee=False, filename=crash.filename)
            first.locals = summaries
            frames.append(first)
        else:
            frames.append(_frame(frame, lineno, frame.f_locals, callee=True))
    if not frames:  # the runtime gave a crash without its traceback
        frames.append(
            Frame(
                filename=crash.filename,
                lineno=crash.lineno,
                function=crash.function_name,
                code=redact(crash.statement.strip(), code=True),
                locals=summaries,
            )
        )
    return frames


def _user_callees(crash: Crash) -> list[tuple[FrameType, int]]:
    """The user frames below the vaccinated function's, outermost first, each with its line."""
    entries = list(traceback.walk_tb(crash.exception.__traceback__))
    below = entries[_start_index(entries, crash) + 1 :] if entries else []
    return [(frame, lineno) for frame, lineno in below if not is_library(frame.f_code.co_filename)]


def _start_index(entries: list[tuple[FrameType, int]], crash: Crash) -> int:
    """The vaccinated function's frame: the last one of its name at the faulty line of the user's file."""
    last_line = crash.first_lineno + crash.source.count("\n")
    exact = [
        i
        for i, (f, line) in enumerate(entries)
        if f.f_code.co_filename == crash.filename and line == crash.lineno and f.f_code.co_name == crash.function_name
    ]
    inside = [
        i
        for i, (f, line) in enumerate(entries)
        if f.f_code.co_filename == crash.filename and crash.first_lineno <= line <= last_line
    ]
    candidates = exact or inside
    return candidates[-1] if candidates else 0


def _frame(frame: FrameType, lineno: int, values: Any, *, callee: bool, filename: str | None = None) -> Frame:
    name = filename or frame.f_code.co_filename
    result = Frame(
        filename=name,
        lineno=lineno,
        function=frame.f_code.co_name,
        qualname=getattr(frame.f_code, "co_qualname", frame.f_code.co_name),
        module=str(frame.f_globals.get("__name__", "")),
        library=is_library(name),
        code=redact(_line(name, lineno, frame), code=True),
        locals=_variables(summarize_namespace(values)),
    )
    if callee and not result.library and result.own_def:  # a comprehension's source is its function's
        result.source, result.first_lineno = _callee_source(frame)
    return result


def is_library(filename: str) -> bool:
    """Whether `filename` belongs to Python itself or an installed package rather than the user."""
    if filename.startswith("<"):
        return not filename.startswith(("<stdin", "<string", "<daifu", "<ipython"))
    path = os.path.abspath(filename)
    return "site-packages" in path or "dist-packages" in path or path.startswith(_library_roots())


@functools.cache
def _library_roots() -> tuple[str, ...]:
    """The folders of Python's own library and of installed packages, each ending in a separator: read
    once per process (`sysconfig` expands its path templates afresh at each call)."""
    roots = {sysconfig.get_path(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    return tuple(root + os.sep for root in sorted(r for r in roots if r))


def _line(filename: str, lineno: int, frame: FrameType) -> str:
    return linecache.getline(filename, lineno, frame.f_globals).strip()


def _callee_source(frame: FrameType) -> tuple[str | None, int | None]:
    try:
        lines, first = inspect.getsourcelines(frame.f_code)
    except (OSError, TypeError):
        return None, None
    source = "".join(lines)
    return (redact(source, code=True), first) if len(source) <= _MAX_CALLEE_SOURCE else (None, None)


def _variables(summaries: dict[str, Summary]) -> dict[str, Variable]:
    return {name: Variable(type=s.type, text=s.text, facts=s.facts) for name, s in summaries.items()}


def bound(report: CrashReport, limit: int = MAX_REPORT_BYTES) -> CrashReport:
    """`report`, shrunk step by step until its JSON fits in `limit` bytes."""
    for shrink in _SHRINK_STEPS:
        if _size(report) <= limit:
            return report
        report = shrink(report.model_copy(deep=True))
        report.truncated = True
    return report


def _size(report: CrashReport) -> int:
    return len(report.model_dump_json().encode())


def _keep_end_frames(report: CrashReport) -> CrashReport:
    if len(report.frames) > 6:
        report.frames = report.frames[:2] + report.frames[-4:]
    return report


def _drop_callee_locals(report: CrashReport) -> CrashReport:
    for frame in report.frames[1:]:
        frame.locals = {}
        frame.source = None
    return report


def _fewer_variables(report: CrashReport) -> CrashReport:
    report.variables = dict(list(report.variables.items())[:40])
    report.operands = [operand for operand in report.operands if operand.wrong][:8]
    report.frames[0].locals = {}  # the same values as `variables`
    return report


def _short_texts(report: CrashReport) -> CrashReport:
    for variable in report.variables.values():
        variable.text = truncate(variable.text, 80)
        variable.facts = {k: v for k, v in variable.facts.items() if len(repr(v)) < 200}
    report.tried = report.tried[-5:]
    for lookup in report.lookups:
        lookup.names = lookup.names[:10]
        lookup.kinds = {k: v for k, v in lookup.kinds.items() if k in lookup.names or k == "item"}
    return report


def _short_source(report: CrashReport) -> CrashReport:
    report.function.source = truncate(report.function.source, 64 * 1024)
    report.exception.message = truncate(report.exception.message, 1000)
    report.frames = [report.frames[0], report.frames[-1]] if len(report.frames) > 1 else report.frames
    return report


_SHRINK_STEPS = [_keep_end_frames, _drop_callee_locals, _fewer_variables, _short_texts, _short_source, lambda r: r]


def render_report_text(report: CrashReport) -> str:
    """The report as the console's `report` command shows it."""
    return "\n".join(_render_lines(report))


def _render_lines(report: CrashReport) -> Iterator[str]:
    f, e = report.function, report.exception
    yield f"Crash report {fingerprint(report)} (attempt {report.attempt})"
    yield f"  {e.module}.{e.type}: {e.message}" if e.module != "builtins" else f"  {e.type}: {e.message}"
    for link in e.chain:
        yield f"  {'caused by' if link.relation == 'cause' else 'while handling'} {link.type}: {link.message}"
    yield ""
    yield f"In {f.qualname} ({f.filename}:{f.lineno}), {f.kind}:"
    yield from (f"    {line}" for line in f.statement.splitlines())
    yield ""
    yield "Traceback, from the vaccinated function down:"
    for frame in report.frames:
        yield f"  File {frame.filename!r}, line {frame.lineno}, in {frame.function}"
        if frame.code:
            yield f"    {frame.code}"
    yield ""
    yield "Live variables:"
    for name, variable in report.variables.items():
        yield f"  {name} = {variable.text}"
    if report.operands:
        yield ""
        yield "Operands of the faulty statement (evaluated where safe):"
        for operand in report.operands:
            yield f"  {operand.wrong}" if operand.wrong else f"  {operand.expression}: {operand.facts}"
    yield ""
    env = report.environment
    yield f"Environment: Python {env.python}, torch {env.torch or '-'}, CUDA {env.cuda or '-'}, {env.platform}"
    for device in env.devices:
        free = f", {device.free_bytes / 2**30:.1f} GiB free" if device.free_bytes is not None else ""
        yield f"  cuda:{device.index} {device.name}{free}"
    if report.tried:
        yield "Repairs tried:"
        yield from (f"  {attempt.decision} -> {attempt.outcome}" for attempt in report.tried)
    if report.truncated:
        yield f"(shortened to fit {MAX_REPORT_BYTES // 1024} KiB)"
