"""A model's reply, checked against the crash: the diagnosis and the repairs the service can stand behind.

Each proposal read by `repairbot.llm_parse` is turned into a protocol `Suggestion` here, or
dropped with the reason: a line-range edit or a whole function becomes the full new `def` of the
function it changes (a surgery of the paused function, or a patch of the callee where the crash
happened), built by the service from the current source; an action gets the imports it forgot;
a skip that would leave a value stale says so and is ranked below every real fix. Every
reason and every change names file lines and functions as the user sees them.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from repairbot.protocol import CrashReport, Frame
from repairbot.backends.base import canonical
from repairbot.llm_code import (
    CodeError,
    Function,
    apply_diff,
    apply_edit,
    clean,
    import_in_action,
    import_in_lines,
    indent_first_line,
    is_diff,
    missing_modules,
    one_def,
    parses,
    problems,
    whole_function,
)
from repairbot.model_words import flagged
from repairbot.names import bound_names
from repairbot.llm_parse import Proposal, read_object, read_proposals
from repairbot.protocol import CATEGORIES
from repairbot.protocol import Culprit, Diagnosis, Suggestion
from repairbot.rules.context import ReportView

STALE_SKIP_CONFIDENCE = 0.2
"""A skip that leaves a value stale ranks below any fix: it trains on nothing, silently."""
MAX_ANSWER_CHARS = 4000
"""Characters of the reply's answer to a person's question that are kept."""


@dataclass
class Reading:
    """What the service takes from one reply: a diagnosis (if readable), checked suggestions, notes,
    and the answer in words to a person's question, if the reply holds one."""

    diagnosis: Diagnosis | None
    suggestions: list[Suggestion]
    notes: list[str] = field(default_factory=list)
    dropped: int = 0
    answer: str | None = None


@dataclass(frozen=True)
class _Editable:
    """A function an edit may change, and the kind of repair that changes it."""

    function: Function
    kind: str
    target: str | None = None
    locals: frozenset[str] = frozenset()


def read_reply(report: CrashReport, reply: str | dict[str, Any]) -> Reading:
    """The diagnosis and suggestions in a reply's text, or in the answer object already found in it
    (`repairbot.llm_answer`); raises `llm_parse.ReplyError` if the text holds no answer."""
    answer = read_object(reply) if isinstance(reply, str) else reply
    proposals, notes = read_proposals(answer)
    dropped = len(notes)
    diagnosis, why = _diagnosis(report, answer.get("diagnosis"))
    notes += [why] if why else []
    sites = _sites(report)
    suggestions: list[Suggestion] = []
    seen: set[tuple[str, str]] = set()
    for proposal in proposals:
        notes += [proposal.note] if proposal.note else []
        try:
            suggestion, changes = _suggestion(report, sites, proposal)
        except CodeError as error:
            notes.append(f"dropped suggestion {proposal.number} ({proposal.kind}): {error}")
            dropped += 1
            continue
        key = (suggestion.kind, canonical(suggestion.code))
        if key in seen:
            notes.append(f"dropped suggestion {proposal.number}: the same repair as an earlier one")
            dropped += 1
            continue
        seen.add(key)
        notes += [f"suggestion {proposal.number}: {change}" for change in changes]
        suggestions.append(suggestion)
    ranked = sorted(suggestions, key=lambda s: -s.confidence)
    said = answer.get("answer")
    words = said.strip()[:MAX_ANSWER_CHARS] if isinstance(said, str) and said.strip() else None
    return Reading(diagnosis, ranked, notes, dropped, words)


def _sites(report: CrashReport) -> list[_Editable]:
    """The paused function, and the user function below it where the crash happened (if any)."""
    f = report.function
    sites = [
        _Editable(
            Function(f.name, f.qualname, f.filename, f.source, f.first_lineno),
            "surgery",
            None,
            frozenset(report.variables),
        )
    ]
    ctx = ReportView(report)
    if not ctx.at_function:
        site = ctx.site
        reachable = bool(site.module) and "<locals>" not in site.qualname
        sites.append(
            _Editable(
                Function(
                    site.function,
                    site.qualname or site.function,
                    site.filename,
                    site.source or "",
                    site.first_lineno or 1,
                ),
                "patch_function",
                ctx.callee_target() if reachable else None,
                frozenset(site.locals),
            )
        )
    return sites


def _suggestion(report: CrashReport, sites: list[_Editable], p: Proposal) -> tuple[Suggestion, list[str]]:
    common: dict[str, Any] = {"explanation": flagged(p.explanation), "confidence": p.confidence, "origin": "model"}
    if p.kind == "retry":
        return Suggestion(kind="retry", **common), []
    if p.kind == "skip":
        return _skip(report, common), []
    code, changes = clean(p.code or "", p.start_line if p.kind == "edit" else None)
    if p.kind == "action":
        return _action(report, code, changes, common)
    if is_diff(code):
        site, new = _apply_diff(sites, p, code)
        fn, place = site.function, None
        changes.append(f"applied the reply's diff to the current source of `{fn.qualname}`")
    elif p.kind == "edit" and p.start_line is not None and p.end_line is not None:
        site = _site_of(sites, p, code)
        fn = site.function
        code = _indented(fn, p.start_line, p.end_line, code, changes)
        code = _with_imports(code, site, changes, import_in_lines)
        new = apply_edit(fn, p.start_line, p.end_line, code)
        place = _edit_place(fn, p.start_line, p.end_line, code)
    else:
        site = _site_of(sites, p, code)
        fn, place = site.function, None
        new, more = whole_function(fn, code)
        changes += more
    if not _same_head(fn, new):  # an edit or a diff that reached the decorators or the def line
        new, more = whole_function(fn, new)
        changes += more
    reasons = problems(fn, new, place)
    if reasons:
        raise CodeError("; ".join(reasons))
    if site.kind == "patch_function":
        if site.target is None:
            raise CodeError(f"`{fn.qualname}` is defined inside another function: no patch can reach it")
        return Suggestion(kind="patch_function", code=new, target=site.target, **common), changes
    return Suggestion(kind="surgery", code=new, **common), changes


def _indented(fn: Function, start: int, end: int, code: str, changes: list[str]) -> str:
    """An edit's new code, its first line indented like the others when it came at column 0 and the
    function only parses that way."""
    if parses(apply_edit(fn, start, end, code)):
        return code
    other = indent_first_line(code)
    if other is None or not parses(apply_edit(fn, start, end, other)):
        return code
    changes.append("indented the first line of the new code like the lines after it (it came at column 0)")
    return other


def _site_of(sites: list[_Editable], p: Proposal, code: str) -> _Editable:
    """The function a proposal changes: by the name it gives, else by its lines, else by the def it holds."""
    if p.function:
        named = [
            s
            for s in sites
            if p.function in (s.function.qualname, s.function.name) or s.function.qualname.endswith("." + p.function)
        ]
        if named:
            return named[0]
    if p.kind == "edit" and p.start_line is not None:
        holding = [s for s in sites if s.function.first_lineno <= p.start_line <= s.function.last_lineno + 1]
        if holding:
            return holding[0]
        raise CodeError(_outside(sites, p))
    defined = re.findall(r"^\s*(?:async\s+)?def\s+(\w+)", code, re.MULTILINE)
    for site in sites:
        if site.function.name in defined:
            return site
    raise CodeError(f"the code defines {', '.join(f'`{d}`' for d in defined) or 'no function'}, not {_names(sites)}")


def _apply_diff(sites: list[_Editable], p: Proposal, diff: str) -> tuple[_Editable, str]:
    """The function a diff applies to (the one it names first, else the first it fits) and the result."""
    named = [s for s in sites if p.function and p.function in (s.function.qualname, s.function.name)]
    errors = []
    for site in named + [s for s in sites if s not in named]:
        try:
            return site, apply_diff(site.function, diff)
        except CodeError as error:
            errors.append(str(error))
    raise CodeError(errors[0])


def _same_head(fn: Function, new_source: str) -> bool:
    """Whether `new_source` keeps the decorators and signature of `fn` (`True` if it does not parse)."""
    new = one_def(new_source, fn.name)
    if isinstance(new, str):
        return True  # `problems` says why it cannot be used
    return _head(new) == _head(fn.node)


def _head(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """The decorators, parameters and return annotation, as syntax trees dumped."""
    parts: list[ast.AST | None] = [*node.decorator_list, node.args, node.returns]
    return [ast.dump(part) if part is not None else "" for part in parts]


def _outside(sites: list[_Editable], p: Proposal) -> str:
    span = f"line {p.start_line}" if p.start_line == p.end_line else f"lines {p.start_line}–{p.end_line}"
    target = f" of `{p.function}`" if p.function else ""
    return f"{span}{target} are outside " + " and ".join(s.function.where for s in sites)


def _names(sites: list[_Editable]) -> str:
    return " or ".join(f"`{s.function.name}`" for s in sites)


def _edit_place(fn: Function, start: int, end: int, new_code: str) -> Callable[[int], str]:
    """Names a line of the edited function: before the edit, its new code, or the old line after it."""
    count = len(new_code.rstrip("\n").split("\n")) if new_code.strip() else 0

    def place(line: int) -> str:
        at = fn.file_line(line)
        if at < start:
            return f"line {at}"
        if at < start + count:
            return f"line {at - start + 1} of the new code for line{'s' if end > start else ''} {start}" + (
                f"–{end}" if end > start else ""
            )
        return f"line {at - count + (end - start + 1)}"

    return place


def _with_imports(code: str, site: _Editable, changes: list[str], add: Callable[[str, dict[str, str]], str]) -> str:
    known = set(site.locals) | set(re.findall(r"[A-Za-z_]\w*", site.function.source))
    modules = missing_modules(code, known)
    if not modules:
        return code
    names = ", ".join(f"`{m}`" for m in modules.values())
    changes.append(f"imported {names}, which the code uses and `{site.function.qualname}` does not import")
    return add(code, modules)


def _action(report: CrashReport, code: str, changes: list[str], common: dict[str, Any]) -> tuple[Suggestion, list[str]]:
    code = textwrap.dedent(code).strip("\n")
    if not code.strip():
        raise CodeError("the action is empty")
    try:
        ast.parse(code)
    except SyntaxError as error:
        raise CodeError(f"the action does not parse: {error.msg} (line {error.lineno} of the action)") from None
    if re.match(r"\s*(@|(async\s+)?def\s|class\s)", code):
        raise CodeError("the action defines a function instead of running statements")
    f = report.function
    site = _Editable(
        Function(f.name, f.qualname, f.filename, f.source, f.first_lineno), "action", None, frozenset(report.variables)
    )
    code = _with_imports(code, site, changes, import_in_action)
    return Suggestion(kind="action", code=code, **common), changes


def _skip(report: CrashReport, common: dict[str, Any]) -> Suggestion:
    """A skip, demoted below every fix when the statement assigns a name that later lines read."""
    stale = stale_after_skip(report)
    if not stale:
        return Suggestion(kind="skip", **common)
    names = ", ".join(f"`{n}`" for n in stale)
    lines = sorted({line for lines in stale.values() for line in lines})
    where = ", ".join(str(n) for n in lines[:3])
    return Suggestion(
        kind="skip",
        explanation=f"{common['explanation']} (Skipping line {report.function.lineno} leaves {names} stale or "
        f"undefined, and line{'s' if len(lines) > 1 else ''} {where} read{'' if len(lines) > 1 else 's'} it.)",
        confidence=min(common["confidence"], STALE_SKIP_CONFIDENCE),
        origin="model",
    )


def stale_after_skip(report: CrashReport) -> dict[str, list[int]]:
    """The names the paused statement assigns that other lines of the function read, with those lines."""
    f = report.function
    try:
        statement = ast.parse(textwrap.dedent(f.statement))
        tree = ast.parse(textwrap.dedent(f.source))
    except SyntaxError:
        return {}
    names = bound_names(statement, nested=True)
    own = set(range(f.lineno, f.lineno + f.statement.rstrip("\n").count("\n") + 1))
    readers: dict[str, list[int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in names:
            line = f.first_lineno + node.lineno - 1
            if line not in own:
                readers.setdefault(node.id, []).append(line)
    return {name: sorted(set(lines)) for name, lines in sorted(readers.items())}


def _diagnosis(report: CrashReport, data: Any) -> tuple[Diagnosis | None, str | None]:
    """The model's diagnosis, or `None` and why it cannot be used."""
    if not isinstance(data, dict):
        return None, "the reply has no diagnosis object; the rules engine's is used"
    explanation = data.get("explanation") or data.get("root_cause") or data.get("cause")
    if not isinstance(explanation, str) or not explanation.strip():
        return None, "the reply's diagnosis has no explanation; the rules engine's is used"
    category = str(data.get("category") or "unknown").strip().lower()
    given = data.get("culprit")
    culprit: dict[str, Any] = given if isinstance(given, dict) else {}
    function = str(data.get("culprit_function") or culprit.get("function") or report.function.qualname)
    line = data.get("culprit_line", culprit.get("lineno", culprit.get("line")))
    frame = _frame_named(report.frames, function)
    return (
        Diagnosis(
            category=category if category in CATEGORIES else "unknown",
            culprit=Culprit(
                function=function,
                filename=frame.filename if frame else report.function.filename,
                lineno=line
                if isinstance(line, int) and not isinstance(line, bool)
                else (frame.lineno if frame else report.function.lineno),
                reason=_first_sentence(explanation),
            ),
            explanation=explanation.strip(),
        ),
        None,
    )


def _frame_named(frames: list[Frame], name: str) -> Frame | None:
    return next(
        (f for f in reversed(frames) if name in (f.qualname, f.function) or f.qualname.endswith("." + name)), None
    )


def _first_sentence(text: str) -> str:
    found = re.match(r"(.+?[.!?])(\s|$)", text.strip(), re.DOTALL)
    return (found.group(1) if found else text.strip())[:300]
