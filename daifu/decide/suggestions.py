"""Checks on a repair suggestion before it is shown or applied.

`check_surgery` and `check_action` say whether the code can be applied at all (a surgery by the
runtime's own rule, `daifu.core.surgery`); whether it may run without a person approving it
(`approve="auto"`) is `daifu.decide.allowlist`'s question. Every check walks
the AST, never the text, and returns all its reasons, so the console can show why a fix was refused.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from collections.abc import Collection

from daifu.core.source import parse_function
from daifu.core.surgery import outside_block, refusals
from repairbot.protocol import FunctionInfo


@dataclass(frozen=True)
class CheckResult:
    """Whether a suggestion passed, and if not, every reason why."""

    reasons: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.reasons

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        return "ok" if self.ok else "; ".join(self.reasons)


def check_action(code: str) -> CheckResult:
    """An action must compile as statements."""
    try:
        compile(code, "<daifu action>", "exec", dont_inherit=True)
    except SyntaxError as error:
        return CheckResult((f"the action does not compile: {error.msg} (line {error.lineno} of the action)",))
    return CheckResult()


def check_surgery(
    source: str, function: FunctionInfo, *, names: Collection[str] | None = None, allow_wide: bool = False
) -> CheckResult:
    """Whether a surgery of the function a report describes would be accepted: the runtime's own rule
    (`daifu.core.surgery.refusals`), and, unless `allow_wide`, a change only inside the block that crashed.

    `names` are those the function can see from outside (its module's globals, its closure
    variables); without them, every name the new code reads from outside is taken as known.
    """
    known = names if names is not None else _outside_names(source)
    reasons = refusals(function.source, function.first_lineno, function.filename, source, function.lineno, known)
    if not allow_wide and not reasons:  # both parse (`refusals` says so), with the file's lines
        old, new = parse_function(function.source, function.first_lineno), parse_function(source, function.first_lineno)
        reasons += outside_block(old, new, function.lineno)
    return CheckResult(tuple(reasons))


def _outside_names(source: str) -> set[str]:
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return set()
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
