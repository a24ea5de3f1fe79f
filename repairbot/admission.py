"""What the service accepts beyond the schema: a request analysis can handle, or a 422 naming the field.

The schema lets through requests no DaiFu client sends and no analysis should run on, each of
which used to end in a 500: a report without any frame, strings holding a lone surrogate (JSON
can spell `"\\ud800"`, UTF-8 cannot encode it), a source nested deeper than Python's parser goes
(100k unary minus), facts of the wrong type (`"shape": "abc"`), thousands of variables, names and
paths longer than any real one. `admit` finds them before any work is done; `check_sources` does
the one costly check (a parse) where analysis runs, off the event loop.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from typing import Any, NamedTuple

from pydantic import NonNegativeInt, TypeAdapter, ValidationError

from repairbot import parsing
from repairbot.protocol import CrashReport, CrashRequest

MAX_FRAMES = 1000
MAX_VARIABLES = 1000
"""In one namespace (the report's variables, a frame's locals); DaiFu's client sends at most 200."""
MAX_TRIED = 100
MAX_NAME = 1000
"""Characters of an identifier-like field: types, modules, function and variable names, qualnames."""
MAX_PATH = 4096
MAX_LINE = 10**7
"""Line numbers and attempt counts beyond this describe no real program."""
MAX_FACT_DEPTH = 6
"""Nesting of lists and dicts in one fact; the deepest DaiFu writes is 3 (`linears`)."""

_Ints = list[NonNegativeInt]
FACT_TYPES: dict[str, TypeAdapter[Any]] = {
    **{key: TypeAdapter(str) for key in ("dtype", "device", "class", "path", "parent")},
    **{key: TypeAdapter(bool) for key in ("requires_grad", "contiguous", "exists", "parent_exists", "nonfinite")},
    **{key: TypeAdapter(NonNegativeInt) for key in ("nan", "inf", "nonfinite_rows", "parameters", "groups", "len")},
    **{key: TypeAdapter(NonNegativeInt | None) for key in ("batch_size", "dataset_len")},
    **{key: TypeAdapter(float) for key in ("min", "max", "mean")},
    "shape": TypeAdapter(_Ints),
    "close": TypeAdapter(list[str]),
    "linears": TypeAdapter(list[tuple[str, NonNegativeInt, NonNegativeInt]]),
}
"""The facts the rules engine reads, with the types `daifu.report.summary` gives them (checked strictly: no
`"5"` for 5)."""

Loc = tuple[str | int, ...]


class Problem(NamedTuple):
    """One field a request cannot be analysed with: where, what is wrong, and a short error type."""

    loc: Loc
    msg: str
    type: str


class Inadmissible(ValueError):
    """A request that passes the schema but cannot be analysed; answered with 422 and each problem."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = [Problem(tuple(printable(part) for part in p.loc), printable(p.msg), p.type) for p in problems]
        super().__init__("; ".join(f"{'.'.join(map(str, p.loc))}: {p.msg}" for p in self.problems))


def printable(part: Any) -> Any:
    """`part` of a location or message, with any lone surrogate escaped so the answer can be encoded."""
    return part.encode("utf-8", "backslashreplace").decode("utf-8") if isinstance(part, str) else part


def admit(request: CrashRequest) -> bytes:
    """What the answer depends on, as canonical JSON (the cache key is made of it): the report, and a
    person's question with the conversation before it, once it is known to be analysable.

    Raises `Inadmissible` naming every field at fault. Runs in time linear in the body's size.
    """
    problems = list(_structure(request.report))
    if problems:
        raise Inadmissible(problems[:20])
    data = request.model_dump(include={"report", "question", "conversation"})
    # Canonical (keys sorted), and encoded by the standard library, which refuses a lone surrogate
    # anywhere; pydantic's own JSON would silently replace one in a dict key.
    try:
        return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:
        raise Inadmissible(list(_surrogates(data, ("body",)))[:20]) from None


def check_sources(report: CrashReport) -> None:
    """Raise `Inadmissible` for a source the parser cannot take at all (not a mere syntax error).

    A source shortened by the client, or not a whole `def`, is still analysed: the rules then edit
    nothing. One nested deeper than the parser's stack is refused: it is no program.
    """
    sources: list[tuple[Loc, str]] = [(("body", "report", "function", "source"), report.function.source)]
    sources += [(("body", "report", "frames", i, "source"), f.source) for i, f in enumerate(report.frames) if f.source]
    for loc, source in sources:
        try:
            parsing.parse(textwrap.dedent(source))
        except parsing.TOO_DEEP:
            raise Inadmissible([Problem(loc, "nested too deeply for Python's parser", "source_too_deep")]) from None
        except parsing.REFUSED:
            pass


def _structure(report: CrashReport) -> Iterator[Problem]:
    at: Loc = ("body", "report")
    if not report.frames:
        yield Problem(at + ("frames",), "at least one frame is required: the vaccinated function's", "too_short")
    yield from _too_many(at + ("frames",), report.frames, MAX_FRAMES)
    yield from _too_many(at + ("tried",), report.tried, MAX_TRIED)
    yield from _namespace(at + ("variables",), report.variables)
    e, f = report.exception, report.function
    yield from _names(at + ("exception",), {"type": e.type, "module": e.module})
    for i, link in enumerate(e.chain):
        yield from _names(at + ("exception", "chain", i), {"type": link.type})
    yield from _names(at + ("function",), {"name": f.name, "qualname": f.qualname, "kind": f.kind})
    yield from _path(at + ("function", "filename"), f.filename)
    yield from _lines(at + ("function",), {"first_lineno": f.first_lineno, "lineno": f.lineno})
    yield from _lines(at, {"attempt": report.attempt})
    for i, frame in enumerate(report.frames[:MAX_FRAMES]):
        where = at + ("frames", i)
        yield from _names(where, {"function": frame.function, "qualname": frame.qualname, "module": frame.module})
        yield from _path(where + ("filename",), frame.filename)
        yield from _lines(where, {"lineno": frame.lineno, "first_lineno": frame.first_lineno or 0})
        yield from _namespace(where + ("locals",), frame.locals)


def _too_many(loc: Loc, items: Any, limit: int) -> Iterator[Problem]:
    if len(items) > limit:
        yield Problem(loc, f"{len(items)} items; at most {limit} are analysed", "too_long")


def _names(loc: Loc, fields: dict[str, str]) -> Iterator[Problem]:
    for name, value in fields.items():
        if len(value) > MAX_NAME:
            yield Problem(loc + (name,), f"{len(value)} characters; at most {MAX_NAME}", "string_too_long")


def _path(loc: Loc, value: str) -> Iterator[Problem]:
    if len(value) > MAX_PATH:
        yield Problem(loc, f"{len(value)} characters; a path has at most {MAX_PATH}", "string_too_long")


def _lines(loc: Loc, fields: dict[str, int]) -> Iterator[Problem]:
    for name, value in fields.items():
        if not 0 <= value <= MAX_LINE:
            yield Problem(loc + (name,), f"{value} is not between 0 and {MAX_LINE}", "out_of_range")


def _namespace(loc: Loc, variables: dict[str, Any]) -> Iterator[Problem]:
    yield from _too_many(loc, variables, MAX_VARIABLES)
    for name, variable in list(variables.items())[:MAX_VARIABLES]:
        if len(name) > MAX_NAME:
            yield Problem(loc, f"a variable name of {len(name)} characters; at most {MAX_NAME}", "string_too_long")
            continue
        yield from _names(loc + (name,), {"type": variable.type})
        yield from _facts(loc + (name, "facts"), variable.facts)


def _facts(loc: Loc, facts: dict[str, Any]) -> Iterator[Problem]:
    for key, value in facts.items():
        if _depth(value) > MAX_FACT_DEPTH:
            yield Problem(loc + (key,), f"nested more than {MAX_FACT_DEPTH} levels deep", "too_deep")
        elif key in FACT_TYPES:
            try:  # as JSON, where a tuple is an array: the value came as JSON
                FACT_TYPES[key].validate_json(json.dumps(value), strict=True)
            except ValidationError as error:
                yield Problem(loc + (key,), f"not a valid {key!r} fact: {error.errors()[0]['msg']}", "fact_type")


def _depth(value: Any) -> int:
    """How deeply lists and dicts nest in `value`, counted without recursion (the value is untrusted)."""
    deepest, level = 0, [(value, 0)]
    while level:
        item, depth = level.pop()
        deepest = max(deepest, depth)
        if deepest > MAX_FACT_DEPTH:
            return deepest
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        level.extend((child, depth + 1) for child in children)
    return deepest


def _surrogates(value: Any, loc: Loc) -> Iterator[Problem]:
    """Where `value` (a dumped report, its depth already bounded) holds a string UTF-8 cannot encode."""
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode()
            except UnicodeEncodeError as error:
                yield Problem(loc, f"a lone surrogate at character {error.start} cannot be encoded", "string_unicode")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _surrogates(key, loc)
            yield from _surrogates(item, loc + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _surrogates(item, loc + (index,))
