"""Whose is the effect a trial stopped at: the repair's own code's, or the program's.

A trial runs a repair and the rest of the interrupted iteration in a sandboxed copy of the run, and
stops at the first effect (`Outcome.STOPPED_AT_EFFECT`); `Verdict.reached` lists the places of code
outside the libraries the effect was reached through. An effect only the program's own, unchanged code
reaches (its checkpoint save at the end of the iteration) is the program's: the trial passed up to it.
An effect the repair's own code reaches — an action's code, the new or changed lines of a surgery or a
patch (a compound statement whose header changed counts whole), or a function one of them calls — is
the repair's. Unattended (`approve="auto"`) that is a failure, unless the effect is on the short list
a repair may have:

- creating the folder a failing write needs: `os.mkdir` (what `os.makedirs` and `Path.mkdir` do) of a
  folder that is, or holds, a path the crash names (its exception's `filename`, or a path in its
  message: `Parent directory runs/exp-1 does not exist`, `Parent directory checkpoints does not exist`).

Anything else — a file written, touched, deleted, a mode changed, a folder no crash asked for — would
be done for real once the repair is applied, so the repair needs a person.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Callable, Iterator

from daifu.core.crash import Crash
from daifu.core.decisions import Action, Decision, Patch, Plays, Surgery
from daifu.core.trial import Outcome, Verdict
from daifu.decide.allowlist import Context, changed_lines

ALLOWED = ("os.mkdir of the folder a path the crash names is in, or that path itself",)
"""The effects a repair's own code may reach in its trial unattended (documented above)."""

Place = tuple[str, int]
"""A place code ran: file name (as the code object names it) and line."""


def repair_effect(decision: Decision, verdict: Verdict, crash: Crash, context: Context | None = None) -> str | None:
    """Why `verdict` fails `decision` without a person: the effect its trial stopped at was reached by
    the repair's own code and is not one of `ALLOWED`; `None` when the trial's verdict stands.
    `context` gives a patch's target its running source."""
    if verdict.outcome is not Outcome.STOPPED_AT_EFFECT:
        return None
    own = _own_code(decision, crash, context)
    places = [place for place in map(_place, verdict.reached) if place is not None]
    reached_by = next((place for place in places if own(place)), None)
    if reached_by is None:
        return None
    if _folder_the_crash_needs(verdict.detail, crash):
        return None
    where = f"{os.path.basename(reached_by[0])}:{reached_by[1]}"
    return (f"its own code ({where}) reached {verdict.detail}, an effect a repair may not have unattended "
            "(the trial stops there; applied, it would be done for real)")


def _place(text: str) -> Place | None:
    filename, _, line = text.rpartition(":")
    return (filename, int(line)) if filename and line.isdigit() else None


def _own_code(decision: Decision, crash: Crash, context: Context | None) -> Callable[[Place], bool]:
    """Whether a place is the repair's own code."""
    tests = list(_own_tests(decision, crash, context))
    return lambda place: any(test(place) for test in tests)


def _own_tests(decision: Decision, crash: Crash, context: Context | None) -> Iterator[Callable[[Place], bool]]:
    for step in decision.steps if isinstance(decision, Plays) else (decision,):
        if isinstance(step, Action):
            yield lambda place: place[0].startswith("<daifu action")
        elif isinstance(step, Surgery):
            lines = {crash.first_lineno + n - 1 for n in changed_lines(crash.source, step.source)}
            yield _in_version(crash.filename, lines)
        elif isinstance(step, Patch):
            qualname = _qualname(step.target)
            callees = context.callees if context is not None else {}
            callee = next((c for key, c in callees.items() if _qualname(key) == qualname), None)
            filename = _callee_file(crash, qualname)
            if callee is not None and filename is not None:
                lines = {callee.first_lineno + n - 1 for n in changed_lines(callee.source, step.source)}
                yield _in_version(filename, lines)
            else:
                yield lambda place: "(patch " in place[0] or "(surgery " in place[0]  # cannot tell: any new version


def _in_version(filename: str, lines: set[int]) -> Callable[[Place], bool]:
    """A place in a new version of `filename` (`file (surgery N)`, `file (patch N)`) at one of `lines`."""
    prefixes = (f"{filename} (surgery ", f"{filename} (patch ")
    return lambda place: place[0].startswith(prefixes) and place[1] in lines


def _qualname(target: str) -> str:
    """The qualified name in a patch's target: `module:qualname`, or `sys.modules['module'].qualname`."""
    if target.startswith("sys.modules["):
        return target.partition("].")[2]
    return target.rpartition(":")[2]


def _callee_file(crash: Crash, qualname: str) -> str | None:
    """The file of the function a patch targets, from the crash's traceback."""
    tb = crash.exception.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if getattr(code, "co_qualname", code.co_name) == qualname or code.co_name == qualname:
            return tb.tb_frame.f_code.co_filename.split(" (", 1)[0]
        tb = tb.tb_next
    return None


_MKDIR = re.compile(r"^os\.mkdir\((.*)\)$", re.S)
_PATH_TEXT = re.compile(r"""[^\s'"`()\[\],;]*[/\\][^\s'"`()\[\],;]*""")
_NAMED_FOLDER = re.compile(r"""\b(?:directory|folder) ['"`]?([^\s'"`]+?)['"`]? (?:does not|doesn't) exist""",
                           re.IGNORECASE)
"""A folder a message names as missing, with or without a separator in it (torch's `Parent directory
checkpoints does not exist.`: a folder beside the program)."""


def _folder_the_crash_needs(effect: str, crash: Crash) -> bool:
    """Whether `effect` makes a folder that is, or holds, a path the crash names."""
    match = _MKDIR.match(effect)
    if match is None:
        return False
    try:
        arguments = ast.literal_eval(f"({match.group(1)},)")
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return False
    if not arguments or not isinstance(arguments[0], str):
        return False
    folder = os.path.abspath(arguments[0])
    return any(path == folder or path.startswith(folder.rstrip(os.sep) + os.sep) for path in _named_paths(crash))


def _named_paths(crash: Crash) -> set[str]:
    """The paths the crash names: its exception's file names and the path-like words of its message."""
    error = crash.exception
    found = {name for name in (getattr(error, "filename", None), getattr(error, "filename2", None))
             if isinstance(name, str)}
    found |= {word.rstrip(".:") for word in _PATH_TEXT.findall(crash.message)}
    found |= {word.rstrip(".:") for word in _NAMED_FOLDER.findall(crash.message)}
    return {os.path.abspath(path) for path in found if path}
