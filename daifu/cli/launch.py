"""Running a script as `__main__` with some of its functions vaccinated, without editing it.

Like `python -m pdb script.py`: the script is parsed, `@daifu.transform` is added to the named
functions in the syntax tree only (the file on disk is untouched), and the tree is compiled with
the script's real file name and line numbers, so tracebacks, `inspect.getsource` and DaiFu's own
source reading all see the user's file as it is. A function the script already decorates with
`daifu.transform` (in any of its forms) is left as written: its own decorator says how.
"""

from __future__ import annotations

import ast
import builtins
import sys
import tokenize
import types
from pathlib import Path
from collections.abc import Callable, Sequence

from daifu import frameworks

DEFAULT_ENTRY = "main"


class LaunchError(Exception):
    """The script cannot be run as asked; the message names the script and says why."""


def vaccinated_code(script: Path, entries: Sequence[str],
                    profiles: Sequence[str] = ()) -> tuple[types.CodeType, list[str]]:
    """The script's code with `entries` vaccinated, and the names vaccinated.

    With no `entries`, `main` is vaccinated if the script defines it. `Class.method` names a method.
    The `profiles` (`daifu.frameworks`) add the script's functions they name.
    """
    try:
        with tokenize.open(script) as stream:  # honours the script's coding declaration
            source = stream.read()
    except OSError as error:
        raise LaunchError(f"cannot read {script}: {error.strerror or error}") from None
    try:
        tree = ast.parse(source, str(script))
    except SyntaxError as error:
        raise LaunchError(f"{script}, line {error.lineno}: {error.msg}") from None
    names = list(entries) or ([DEFAULT_ENTRY] if _find(tree, DEFAULT_ENTRY) else [])
    names += [name for profile in profiles for name in frameworks.script_functions(profile, tree) if name not in names]
    spellings = _transform_spellings(tree)
    for name in names:
        node = _find(tree, name)
        if node is None:
            known = ", ".join(_function_names(tree)) or "none"
            raise LaunchError(f"{script} has no function {name!r} to vaccinate (its functions: {known})")
        if not any(_dotted(_callee(d)) in spellings for d in node.decorator_list):
            node.decorator_list.append(_transform_decorator(node))
    return compile(tree, str(script), "exec", dont_inherit=True), names


def run_as_main(code: types.CodeType, script: Path, argv: Sequence[str],
                before: Callable[[], None] | None = None) -> None:
    """Run `code` as the `__main__` module of `script`, with `sys.argv` and `sys.path[0]` as
    `python script.py argv...` would set them; both and `__main__` are restored afterwards.
    `before` is called once they are set, before the script's first statement."""
    module = types.ModuleType("__main__")
    module.__file__ = str(script)
    module.__builtins__ = builtins  # type: ignore[attr-defined]
    saved = sys.modules["__main__"], sys.argv, sys.path[0]
    sys.modules["__main__"], sys.argv, sys.path[0] = module, [str(script), *argv], str(script.parent)
    try:
        if before is not None:
            before()
        exec(code, module.__dict__)
    finally:
        sys.modules["__main__"], sys.argv, sys.path[0] = saved


def script_traceback(traceback: types.TracebackType | None,
                     code: types.CodeType) -> types.TracebackType | None:
    """`traceback` from the script's own module frame (running `code`) on, as `python script.py` would
    show it; whole when it never reached the script (the launcher failed: those frames are the story)."""
    found = traceback
    while found is not None and found.tb_frame.f_code is not code:
        found = found.tb_next
    return found or traceback


def _find(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    """The top-level function `name`, or the method `Class.method`."""
    scope: list[ast.stmt] = tree.body
    *classes, function = name.split(".")
    for class_name in classes:
        found = [n for n in scope if isinstance(n, ast.ClassDef) and n.name == class_name]
        if not found:
            return None
        scope = found[-1].body
    defs = [n for n in scope if isinstance(n, ast.FunctionDef) and n.name == function]
    return defs[-1] if defs else None  # the last definition is the one the module keeps


def _transform_spellings(tree: ast.Module) -> set[str]:
    """How the script can name `daifu.transform`: `daifu.transform`, and what its imports add
    (`import daifu as d` gives `d.transform`, `from daifu import transform as t` gives `t`)."""
    spellings = {"daifu.transform", "daifu.vaccinate.transform"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in ("daifu", "daifu.vaccinate") and alias.asname:
                    spellings.add(f"{alias.asname}.transform")
        elif isinstance(node, ast.ImportFrom) and node.module in ("daifu", "daifu.vaccinate") and node.level == 0:
            for alias in node.names:
                if alias.name == "transform":
                    spellings.add(alias.asname or alias.name)
                elif alias.name == "vaccinate":
                    spellings.add(f"{alias.asname or alias.name}.transform")
    return spellings


def _callee(decorator: ast.expr) -> ast.expr:
    """The decorator itself, or what it calls (`daifu.transform(globals())` -> `daifu.transform`)."""
    return decorator.func if isinstance(decorator, ast.Call) else decorator


def _dotted(node: ast.expr) -> str:
    """`a.b.c` for a chain of names and attributes; '' for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _function_names(tree: ast.Module) -> list[str]:
    names = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            names.append(node.name)
        elif isinstance(node, ast.ClassDef):
            names += [f"{node.name}.{n.name}" for n in node.body if isinstance(n, ast.FunctionDef)]
    return names


def _transform_decorator(node: ast.FunctionDef) -> ast.expr:
    """`__import__('daifu').transform`, placed on the `def` line: it adds no name to the script's
    globals, and it is the innermost decorator, so it vaccinates the function as written."""
    decorator = ast.parse("__import__('daifu').transform", mode="eval").body
    for part in ast.walk(decorator):
        part.lineno = part.end_lineno = node.lineno  # type: ignore[attr-defined]
        part.col_offset = part.end_col_offset = node.col_offset  # type: ignore[attr-defined]
    return decorator
