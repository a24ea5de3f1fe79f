"""Checks on a repair suggestion before it is shown or applied.

`check_surgery` and `check_action` say whether the code can be applied at all; `check_safety`
says whether it may run without a person approving it (`approve="auto"`). Every check walks the
AST, never the text, and returns all its reasons, so the console can show why a fix was refused.
"""

from __future__ import annotations

import ast
import builtins
import textwrap
from dataclasses import dataclass
from collections.abc import Collection, Iterator

from daifu.core.surgery import outside_block, unknown_names
from repairbot.protocol import FunctionInfo


@dataclass(frozen=True)
class Verdict:
    """Whether a suggestion passed, and if not, every reason why."""

    reasons: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.reasons

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        return "ok" if self.ok else "; ".join(self.reasons)


def check_action(code: str) -> Verdict:
    """An action must compile as statements."""
    try:
        compile(code, "<daifu action>", "exec", dont_inherit=True)
    except SyntaxError as error:
        return Verdict((f"the action does not compile: {error.msg} (line {error.lineno})",))
    return Verdict()


def check_surgery(
    source: str, function: FunctionInfo, *, names: Collection[str] | None = None, allow_wide: bool = False
) -> Verdict:
    """A surgery must define the same function, compile, and change only the block that crashed.

    `names` are those the function can see (locals, globals); with it, every name the new code
    loads must exist, be assigned in the function, or be a builtin. Without it that check is skipped.
    """
    new = _one_def(source, "the surgery")
    old = _one_def(function.source, "the crashed function")
    if isinstance(new, str) or isinstance(old, str):
        return Verdict(tuple(r for r in (new, old) if isinstance(r, str)))
    reasons = list(_same_signature(old, new))
    try:
        compile(textwrap.dedent(source), function.filename, "exec", dont_inherit=True)
    except SyntaxError as error:
        reasons.append(f"the surgery does not compile: {error.msg}")
    if not allow_wide and not reasons:
        reasons += outside_block(old, new, function.lineno - function.first_lineno + 1)
    if names is not None:
        reasons += [f"the surgery uses {n!r}, which is not defined" for n in sorted(unknown_names(new, names))]
    return Verdict(tuple(reasons))


def _one_def(source: str, what: str) -> ast.FunctionDef | ast.AsyncFunctionDef | str:
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError as error:
        return f"{what} does not parse: {error.msg} (line {error.lineno})"
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if len(tree.body) != 1 or len(defs) != 1:
        return f"{what} must be exactly one function definition"
    return defs[0]


def _same_signature(
    old: ast.FunctionDef | ast.AsyncFunctionDef, new: ast.FunctionDef | ast.AsyncFunctionDef
) -> Iterator[str]:
    if new.name != old.name:
        yield f"the surgery defines {new.name!r}, not {old.name!r}"
    if _parameters(new) != _parameters(old):
        before, after = ", ".join(_parameters(old)), ", ".join(_parameters(new))
        yield f"the surgery changes the parameters from ({before}) to ({after})"
    if type(new) is not type(old):
        yield "the surgery changes whether the function is async"


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = node.args
    names = [p.arg for p in a.posonlyargs] + ["/"] * bool(a.posonlyargs) + [p.arg for p in a.args]
    names += ["*" + a.vararg.arg] if a.vararg else (["*"] if a.kwonlyargs else [])
    names += [p.arg for p in a.kwonlyargs] + (["**" + a.kwarg.arg] if a.kwarg else [])
    return names


_FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__", "breakpoint", "input"}
_FORBIDDEN_MODULES = {
    "subprocess",
    "socket",
    "urllib",
    "urllib3",
    "http",
    "requests",
    "httpx",
    "aiohttp",
    "ftplib",
    "smtplib",
    "telnetlib",
    "ctypes",
    "importlib",
    "pty",
    "multiprocessing",
}
_FORBIDDEN_ATTRS = {
    "system",
    "popen",
    "spawnl",
    "spawnv",
    "execv",
    "execve",
    "execl",
    "fork",
    "kill",
    "remove",
    "unlink",
    "rmdir",
    "removedirs",
    "rmtree",
    "__subclasses__",
    "__builtins__",
    "__import__",
    "__globals__",
}
_OS_ONLY = {"remove", "kill", "system", "popen", "fork"}
"""Attribute names that are harmless on other objects (`list.remove`) and forbidden on `os`."""


def check_safety(code: str) -> Verdict:
    """Whether code may run unattended: no processes, no eval, no deleting files, no network."""
    try:
        tree = ast.parse(textwrap.dedent(code))
    except SyntaxError as error:
        return Verdict((f"the code does not parse: {error.msg}",))
    reasons = list(dict.fromkeys(_unsafe(tree)))
    return Verdict(tuple(reasons))


def _unsafe(tree: ast.AST) -> Iterator[str]:
    os_names = {"os", "posix", "nt"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _module_check(alias.name)
                if alias.name in os_names:
                    os_names.add(alias.asname or alias.name)
        elif isinstance(node, ast.ImportFrom):
            yield from _module_check(node.module or "")
            yield from (
                f"it imports {a.name!r} from {node.module}"
                for a in node.names
                if a.name in _FORBIDDEN_ATTRS | _FORBIDDEN_CALLS or a.name in _FORBIDDEN_MODULES
            )
        elif isinstance(node, ast.Name) and node.id in _FORBIDDEN_CALLS | _FORBIDDEN_MODULES | {"__builtins__"}:
            yield f"it uses {node.id!r}"
        elif isinstance(node, ast.Attribute):
            yield from _attribute_check(node, os_names)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"getattr", "setattr", "delattr"}
        ):
            yield from _getattr_check(node)


def _module_check(module: str) -> Iterator[str]:
    if module.split(".")[0] in _FORBIDDEN_MODULES:
        yield f"it imports {module!r}"


def _attribute_check(node: ast.Attribute, os_names: set[str]) -> Iterator[str]:
    if node.attr not in _FORBIDDEN_ATTRS and not node.attr.startswith(("spawn", "exec")):
        return
    on_os = isinstance(node.value, ast.Name) and node.value.id in os_names
    if node.attr in _OS_ONLY and not on_os:
        return
    owner = node.value.id if isinstance(node.value, ast.Name) else "an object"
    yield f"it uses {owner}.{node.attr}"


def _getattr_check(node: ast.Call) -> Iterator[str]:
    name = node.args[1] if len(node.args) > 1 else None
    if not isinstance(name, ast.Constant) or not isinstance(name.value, str):
        yield f"it calls {node.func.id}() with a computed attribute name"  # type: ignore[attr-defined]
    elif name.value in _FORBIDDEN_ATTRS or name.value in _FORBIDDEN_CALLS:
        yield f"it reaches {name.value!r} through {node.func.id}()"  # type: ignore[attr-defined]
