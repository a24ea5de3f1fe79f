"""Where the run goes on after a decision: the line a person reads before leaving a prompt.

The console and the approval prompt only take a decision; the runtime carries it out once they
return. The person who took it should see, before the run goes on, what will happen next: which
statement runs, in which file and line. A surgery is mapped onto the new source exactly as the
runtime maps it (`daifu.core.surgery.resume_path`), so the line shown is the line that runs.
"""

from __future__ import annotations

from daifu.core.blocks import COMPOUND, locate, node_at, path_of
from daifu.core.crash import Crash
from daifu.core import kinds
from daifu.core.decisions import Decision, Plays, Surgery
from daifu.core.surgery import SurgeryRefused, resume_path
from daifu.core.version import Version, build_version


def resume_point(crash: Crash, decision: Decision) -> str:
    """One sentence: what `decision` does first and where the run resumes, as `file:line: statement`."""
    here = f"{crash.filename}:{crash.lineno}: {_one_line(crash.statement)}"
    kind = kinds.kind_of(decision)
    if kind.resumes == kinds.HERE:
        first = f"{kind.first}, then " if kind.first else ""
        return f"{first}the run resumes at {here} (run again)"
    if kind.resumes == kinds.NEXT_ITERATION:
        return f"the rest of this iteration is left out; the loop around {here} goes on with its next iteration"
    if kind.resumes == kinds.AFTER:
        return _after(crash, here)
    if isinstance(decision, Surgery):
        return _in_new_source(crash, decision.source)
    if isinstance(decision, Plays):
        return f"{len(decision.steps)} plays are carried out in order ({'+'.join(kinds.step_names(decision))})"
    return "the original exception is raised"


def _after(crash: Crash, here: str) -> str:
    if crash.kind in ("for", "while"):
        return f"the `{crash.kind}` loop at {here} ends as if exhausted (its `else` runs)"
    if crash.kind == "if":
        return f"neither branch of the `if` at {here} runs; the run goes on after it"
    if crash.kind == "with":
        return f"the body of the `with` at {here} does not run; the run goes on after it"
    if crash.kind == "match":
        return f"no case of the `match` at {here} runs; the run goes on after it"
    return f"the run goes on after {here} (not run)"


def _in_new_source(crash: Crash, source: str) -> str:
    """Where the new version resumes; the runtime's own mapping, on throwaway compiled copies."""
    fallback = f"the new {crash.function_name} resumes at the statement that takes the place of line {crash.lineno}"
    try:
        old = _version(crash.source, crash.first_lineno, crash.filename)
        new = _version(source, crash.first_lineno, crash.filename)
        found = locate(old.fdef.body, crash.lineno, None)
        if found is None:
            return fallback
        faulty, _header = found
        path, _same, _finals = resume_path(old, new, path_of(faulty))
        try:
            node = node_at(new.fdef, path)
        except IndexError:  # the block ends there: the run goes on after it
            return f"the new {crash.function_name} goes on after the block of line {crash.lineno}"
        text = new.statement_text(node, header_only=isinstance(node, COMPOUND))  # a block runs from its header
    except (SyntaxError, ValueError, SurgeryRefused):  # the runtime refuses it and says why
        return fallback
    return f"the new {crash.function_name} resumes at {crash.filename}:{node.lineno}: {_one_line(text)}"


def _version(source: str, first_lineno: int, filename: str) -> Version:
    return build_version(0, source, first_lineno, filename, 0, (), fast=False)


def _one_line(statement: str) -> str:
    lines = statement.strip().splitlines()
    return lines[0] + (" ..." if len(lines) > 1 else "") if lines else ""

