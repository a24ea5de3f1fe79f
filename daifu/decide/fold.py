"""Folding a repeated action into one surgery.

An action repairs one crash: it runs in the faulty frame, then the faulty statement runs again. When
the same action was applied at the same site before in this run and the bot proposes it again, the
crash is not a rare bad batch but the statement meeting data it cannot take, and it will come back:
an action that masks unknown ids would run once per crash, each crash costing a restore. The fold
makes it one edit of the faulty statement instead, which does what DaiFu does at each crash, in place:

    try:
        <the faulty statement>
    except <the crash's exception type>:
        <the action's code>
        <the faulty statement>

On batches the statement takes it does nothing; on those it does not, the action runs and the
statement runs again, as before, with no crash. The fold is a candidate like any other, placed before
the action and verified as usual (check, allowlist, trial); if it cannot be expressed (the faulty
statement is a header or shares its line, the action binds a name that is not a local of the
function, or does something a statement of the function cannot: `global`, `return`, a definition, an
exception type that cannot be named there), the terminal says that the action repeats, how often, and
why it is not folded.
"""

from __future__ import annotations

import ast
import builtins
import os
import textwrap

from daifu.core.crash import Crash
from daifu.core.decisions import Action, Surgery
from daifu.core.names import bound_names
from daifu.decide.candidates import Candidate
from daifu.decide.verify import Verification
from daifu.say import say_once
from daifu.state import RUN
from repairbot.protocol import Suggestion

_NOT_IN_PLACE = (ast.Global, ast.Nonlocal, ast.Return, ast.Yield, ast.YieldFrom, ast.Await, ast.FunctionDef,
                 ast.AsyncFunctionDef, ast.ClassDef, ast.Break, ast.Continue)
"""What an action may do that the same code, placed in the function, would do otherwise."""


def fold_repeated(stage: Verification, found: list[Candidate]) -> list[Candidate]:
    """`found`, with a surgery folding each action applied at this site before placed before it (the
    terminal says so), or, where it cannot be folded, the same list, the terminal saying that it repeats."""
    crash = stage.crash
    result: list[Candidate] = []
    for candidate in found:
        decision = candidate.decision
        times = _applied(crash, decision.code) if isinstance(decision, Action) else 0
        if times and isinstance(decision, Action):
            result += _folded(stage, candidate, decision, times)
        result.append(candidate)
    return result


def _folded(stage: Verification, candidate: Candidate, action: Action, times: int) -> list[Candidate]:
    crash = stage.crash
    where = f"{os.path.basename(crash.filename)}:{crash.lineno}"
    repeats = f"the action at {where} would run again (applied {times} time{'' if times == 1 else 's'} there already)"
    folded = fold(crash, action.code)
    if isinstance(folded, str):
        say_once(f"{repeats}; it is not folded into one surgery: {folded}")
        return []
    say_once(f"{repeats}: folded into one surgery of the faulty statement, tried first (verified as any repair)")
    suggestion = Suggestion(kind="surgery", code=folded.source, confidence=candidate.confidence,
                            explanation=f"the action applied {times} time(s) at {where}, folded into the statement")
    return [Candidate(folded, suggestion, stage=stage)]


def _applied(crash: Crash, code: str) -> int:
    """How often action `code` was applied at the crash's site in this run."""
    site = (crash.qualname, crash.filename, crash.lineno)
    return sum(1 for entry in RUN.history
               if (entry.get("function"), entry.get("file"), entry.get("line")) == site
               and entry.get("decision") == "Action" and entry.get("code") == code
               and entry.get("duration_ms") is not None)


def fold(crash: Crash, code: str) -> Surgery | str:
    """The surgery doing in place what action `code` does at `crash` (see the module docstring), or why
    there is none."""
    if crash.kind != "statement":
        return f"the faulty statement is a `{crash.kind}` header"
    lines = crash.source.split("\n")
    index = crash.lineno - crash.first_lineno
    span = len(crash.statement.split("\n"))
    original = lines[index: index + span] if 0 <= index < len(lines) else []
    if not _alone(original):
        return "the faulty statement shares its lines with another"
    try:
        tree = ast.parse(textwrap.dedent(code))
    except SyntaxError as error:
        return f"the action does not parse: {error.msg}"
    if not tree.body:
        return "the action is empty"
    reason = _not_in_place(tree, crash)
    if reason:
        return reason
    name = _exception_name(crash)
    if name is None:
        return f"its exception type, {crash.exception_type}, has no name in the function's module"
    indent = lines[index][: len(lines[index]) - len(lines[index].lstrip())]
    inner = indent + "    "
    body = [inner + line[len(indent):] if line.strip() else line for line in original]
    action = [inner + line if line.strip() else line for line in textwrap.dedent(code).strip("\n").split("\n")]
    replaced = [indent + "try:", *body, f"{indent}except {name}:", *action, *body]
    return Surgery("\n".join(lines[:index] + replaced + lines[index + span:]))


def _alone(lines: list[str]) -> bool:
    """Whether `lines` hold one simple statement and nothing else."""
    try:
        tree = ast.parse(textwrap.dedent("\n".join(lines)))
    except SyntaxError:
        return False
    return len(tree.body) == 1 and not hasattr(tree.body[0], "body")


def _not_in_place(tree: ast.Module, crash: Crash) -> str | None:
    """Why the action's code would do otherwise as statements of the function; `None` if it would not."""
    for node in ast.walk(tree):
        if isinstance(node, _NOT_IN_PLACE):
            return f"the action holds a `{type(node).__name__.lower()}`, which would do otherwise in the function"
    foreign = sorted(bound_names(tree) - set(crash.locals))
    if foreign:
        return f"the action binds {', '.join(foreign)}, which the function does not have as locals"
    return None


def _exception_name(crash: Crash) -> str | None:
    """The name the crash's exception type goes by in the function (a builtin, or a global of its module)."""
    kind = type(crash.exception)
    name = kind.__name__
    if getattr(builtins, name, None) is kind or crash.globals.get(name) is kind:
        return name
    return None
