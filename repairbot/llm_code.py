"""A model's code, made into what a repair needs: the whole new function, or statements to run.

A model is asked for line-range edits against a numbered listing, from which the service builds
the new `def` itself; but models also send back the whole function (without its decorator, with
other annotations, inside its class), a unified diff, the listing's line numbers or a markdown
fence inside the code. Each of these is normalised here against the function's current source,
and every normalisation is reported as a note. What cannot be made right raises `CodeError`,
whose message is in the user's terms: file line numbers and the function's name.

Nothing here runs the code: it is parsed (`ast`) and tokenized, never compiled into the service.
"""

from __future__ import annotations

import ast
import builtins
import re
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from repairbot.names import bound_names
from repairbot.rules.edit import wrap_name


class CodeError(ValueError):
    """The model's code cannot become a repair; the message says why, in file lines."""


@dataclass(frozen=True)
class Function:
    """A function's current source, as the report carries it (decorators and indentation included)."""

    name: str
    qualname: str
    filename: str
    source: str
    first_lineno: int

    @cached_property
    def lines(self) -> list[str]:
        return self.source.splitlines()

    @property
    def last_lineno(self) -> int:
        return self.first_lineno + len(self.lines) - 1

    @cached_property
    def node(self) -> ast.FunctionDef | ast.AsyncFunctionDef:
        """The parsed `def`, its line numbers relative to `source` (line 1 is `first_lineno`)."""
        found = one_def(self.source, self.name)
        if isinstance(found, str):
            raise CodeError(f"the current source of `{self.qualname}` cannot be read: {found}")
        return found

    @property
    def def_lineno(self) -> int:
        """The file line of the `def` keyword (after any decorators)."""
        return self.first_lineno + self.node.lineno - 1

    def file_line(self, relative: int) -> int:
        return self.first_lineno + relative - 1

    def text(self, lineno: int) -> str:
        """The source line at file line `lineno`, stripped."""
        return self.lines[lineno - self.first_lineno].strip()

    @property
    def where(self) -> str:
        return f"`{self.qualname}` (lines {self.first_lineno}–{self.last_lineno} of {self.filename})"


def one_def(source: str, name: str | None = None) -> ast.FunctionDef | ast.AsyncFunctionDef | str:
    """The one function `source` defines (it may be indented), or why there is not exactly one."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError as error:
        return f"it does not parse ({error.msg}, line {error.lineno} of the function)"
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if len(defs) != 1 or len(tree.body) != 1:
        return "it is not exactly one function definition"
    if name is not None and defs[0].name != name:
        return f"it defines `{defs[0].name}`, not `{name}`"
    return defs[0]


_FENCE = re.compile(r"^\s*```[\w+-]*[ \t]*\n(.*?)\n?```\s*$", re.DOTALL)
_NUMBERED = re.compile(r"^\s*(?:>>?|->)?\s*(\d{1,6})(?:\s*[:|])?(?: {1,2}|\t|$)(.*)$")


def clean(code: str, first: int | None = None) -> tuple[str, list[str]]:
    """`code` without a markdown fence around it and without the listing's line numbers.

    Numbers are taken for the listing's only when every non-blank line has one and they increase
    (and start at `first`, the line the code is meant to begin at, when given).
    """
    notes = []
    fenced = _FENCE.match(code)
    if fenced:
        code = fenced.group(1)
        notes.append("removed a markdown fence around the code")
    code = code.replace("\r\n", "\n").expandtabs(4)
    lines = code.split("\n")
    matches = [_NUMBERED.match(line) for line in lines if line.strip()]
    numbers = [int(m.group(1)) for m in matches if m]
    increasing = all(b > a for a, b in zip(numbers, numbers[1:]))
    if numbers and len(numbers) == len(matches) and increasing and (first is None or numbers[0] == first):
        stripped = [_NUMBERED.match(line) for line in lines]
        code = "\n".join(m.group(2) if m and line.strip() else "" for m, line in zip(stripped, lines))
        notes.append(f"removed the listing's line numbers ({numbers[0]}–{numbers[-1]}) copied into the code")
    return code, notes


def apply_edit(fn: Function, start: int, end: int, new_code: str) -> str:
    """The source of `fn` with file lines `start`..`end` replaced by `new_code`.

    `end = start - 1` inserts before `start`; an empty `new_code` deletes the lines. The new lines
    are shifted as a block so that their outermost indentation is that of the lines they replace.
    """
    if not (fn.first_lineno <= start <= fn.last_lineno + 1 and start - 1 <= end <= fn.last_lineno):
        span = f"line {start}" if start == end else f"lines {start}–{end}"
        raise CodeError(f"{span} of {fn.filename} are outside {fn.where}")
    offset = start - fn.first_lineno
    old = fn.lines[offset : end - fn.first_lineno + 1]
    anchor = old or fn.lines[offset : offset + 1] or fn.lines[-1:]
    new = _shift(new_code.rstrip("\n").split("\n") if new_code.strip() else [], _indent(anchor))
    return "\n".join(fn.lines[:offset] + new + fn.lines[end - fn.first_lineno + 1 :]) + "\n"


def _indent(lines: list[str]) -> int:
    widths = [len(line) - len(line.lstrip()) for line in lines if line.strip()]
    return min(widths) if widths else 0


def _shift(lines: list[str], width: int) -> list[str]:
    by = width - _indent(lines)
    if by >= 0:
        return [" " * by + line if line.strip() else "" for line in lines]
    return [line[-by:] if line.strip() else "" for line in lines]


def is_diff(code: str) -> bool:
    return re.search(r"^@@ .* @@", code, re.MULTILINE) is not None or code.lstrip().startswith(("--- ", "diff "))


def apply_diff(fn: Function, diff: str) -> str:
    """The source of `fn` with a unified diff applied; hunks are found by their text near their line."""
    lines = list(fn.lines)
    hunks = _hunks(diff)
    if not hunks:
        raise CodeError("the reply's diff has no hunk (no line starting with '-', '+' or ' ')")
    for number, (stated, old, new) in reversed(list(enumerate(hunks, start=1))):
        at = _find(lines, old, stated - fn.first_lineno if stated else None)
        if at is None:
            where = f" (stated at line {stated})" if stated else ""
            raise CodeError(f"hunk {number} of the reply's diff{where} does not match the source of {fn.where}")
        lines[at : at + len(old)] = new
    return "\n".join(lines) + "\n"


def _hunks(diff: str) -> list[tuple[int | None, list[str], list[str]]]:
    """(stated old start line, old lines, new lines) for each hunk of a unified diff."""
    hunks: list[tuple[int | None, list[str], list[str]]] = []
    current: tuple[int | None, list[str], list[str]] | None = None
    for line in diff.replace("\r\n", "\n").split("\n"):
        header = re.match(r"@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@", line)
        if header or line.startswith(("--- ", "+++ ", "diff ", "index ")):
            current = None
            if header:
                current = (int(header.group(1)), [], [])
                hunks.append(current)
            continue
        if line.startswith("\\"):
            continue
        if current is None:
            current = (None, [], [])
            hunks.append(current)
        mark, text = (line[0], line[1:]) if line[:1] in ("-", "+", " ") else (" ", line)
        if mark in " -":
            current[1].append(text)
        if mark in " +":
            current[2].append(text)
    while hunks and not hunks[-1][1] and not hunks[-1][2]:
        hunks.pop()
    return [(at, _trim_end(old), _trim_end(new)) for at, old, new in hunks]


def _trim_end(lines: list[str]) -> list[str]:
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


def _find(lines: list[str], old: list[str], near: int | None) -> int | None:
    """Where `old` occurs in `lines` (exactly, else ignoring trailing blanks), nearest to `near`."""
    if not old:
        return near if near is not None and 0 <= near <= len(lines) else None
    for same in (lambda a, b: a == b, lambda a, b: a.rstrip() == b.rstrip()):
        starts = [i for i in range(len(lines) - len(old) + 1) if all(same(a, b) for a, b in zip(lines[i:], old))]
        if starts:
            return min(starts, key=lambda i: abs(i - near)) if near is not None else starts[0]
    return None


def whole_function(fn: Function, code: str) -> tuple[str, list[str]]:
    """A whole function from the reply, given the decorators, `def` line and indentation of `fn`.

    The reply may hold the function alone, with other code around it, or inside its class. A
    repair changes the body only, so decorators and signature are those of the current source;
    each difference put right is noted.
    """
    text = textwrap.dedent(code).strip("\n")
    try:
        tree = ast.parse(text)
    except SyntaxError as error:
        raise CodeError(f"the reply's function does not parse: {error.msg} (line {error.lineno} of its code)") from None
    node, notes = _find_def(tree, fn)
    lines = text.split("\n")
    body_start = node.body[0].lineno if node.body else node.lineno + 1
    body = lines[body_start - 1 : node.end_lineno]
    notes += _decorator_notes(fn, node)
    if ast.dump(node.args) != ast.dump(fn.node.args) or type(node) is not type(fn.node):
        if _names(node.args) != _names(fn.node.args):
            raise CodeError(
                f"the reply changes the parameters of `{fn.name}` (line {fn.def_lineno}) "
                f"from ({', '.join(_names(fn.node.args))}) to ({', '.join(_names(node.args))})"
            )
        notes.append(f"kept the `def` line of `{fn.name}` (line {fn.def_lineno}) as it is: the reply rewrote it")
    own_body = fn.node.body[0].lineno if fn.node.body else fn.node.lineno + 1
    head = fn.lines[: own_body - 1]
    body_indent = _indent(fn.lines[own_body - 1 : own_body]) if fn.node.body else _indent(head) + 4
    return "\n".join(head + _shift(body, body_indent)) + "\n", notes


def _find_def(tree: ast.Module, fn: Function) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef, list[str]]:
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef)
    top = [n for n in tree.body if isinstance(n, kinds)]
    mine = [n for n in top if n.name == fn.name]
    others = [n for n in tree.body if not isinstance(n, kinds)]
    if mine:
        notes = [f"left out code outside the function in the reply: {_brief(others)}"] if others else []
        return mine[0], notes
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        inside = [n for n in cls.body if isinstance(n, kinds) and n.name == fn.name]
        if inside:
            return inside[0], [f"took `{fn.name}` out of the class `{cls.name}` the reply returned whole"]
    if len(top) == 1:
        raise CodeError(f"the reply's code defines `{top[0].name}`, not `{fn.name}`")
    raise CodeError(f"the reply's code holds no function `{fn.name}`")


def _brief(nodes: list[ast.stmt]) -> str:
    text = "; ".join(ast.unparse(n).splitlines()[0] for n in nodes)
    return f"`{text[:80]}`" + ("..." if len(text) > 80 else "")


def _decorator_notes(fn: Function, node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    had = [(d.lineno, ast.unparse(d)) for d in fn.node.decorator_list]
    given = {ast.unparse(d) for d in node.decorator_list}
    notes = [
        f"restored the decorator `@{text}` at line {fn.file_line(line)}, which the reply left out"
        for line, text in had
        if text not in given
    ]
    kept = {text for _, text in had}
    notes += [f"left out the decorator `@{text}` the reply added" for text in sorted(given - kept)]
    return notes


def _names(args: ast.arguments) -> list[str]:
    names = [a.arg for a in args.posonlyargs + args.args]
    names += ["*" + args.vararg.arg] if args.vararg else []
    names += [a.arg for a in args.kwonlyargs]
    return names + (["**" + args.kwarg.arg] if args.kwarg else [])


def problems(fn: Function, new_source: str, place: Callable[[int], str] | None = None) -> list[str]:
    """Why `new_source` cannot replace `fn`: it does not parse, or no longer assigns a name it reads.

    A name the old body assigned, that the new body still reads but never assigns, would read a
    stale value left in the paused frame (or raise `NameError` in the next call). place: names
    a line of `new_source` (from 1) in the user's terms; the file line by default.
    """
    place = place or (lambda line: f"line {fn.file_line(line)}")
    try:
        ast.parse(textwrap.dedent(new_source))
    except SyntaxError as error:
        return [f"the new `{fn.name}` does not parse: {error.msg} at {place(error.lineno or 1)}"]
    new = one_def(new_source, fn.name)
    if isinstance(new, str):
        return [f"the new `{fn.name}`: {new}"]
    if ast.dump(new) == ast.dump(fn.node):
        return [f"it leaves `{fn.name}` unchanged"]
    reasons = []
    for name in sorted((bound_names(fn.node, nested=True) & loaded(new)) - bound_names(new, nested=True)):
        first = min(n.lineno for n in ast.walk(new) if isinstance(n, ast.Name) and n.id == name)
        reasons.append(
            f"the new `{fn.name}` no longer assigns `{name}`, which it still reads at {place(first)}: "
            f"the stale `{name}` from before the crash would be used"
        )
    return reasons


def loaded(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


_ALIASES = {"np": "numpy", "F": "torch.nn.functional", "nn": "torch.nn", "optim": "torch.optim", "torch": "torch"}
"""Names that mean a module by convention, when nothing else in the frame or the function binds them."""


def missing_modules(code: str, known: set[str]) -> dict[str, str]:
    """Modules `code` uses by name without importing them, when neither `known` nor builtins has the name.

    `known`: names the paused frame is known to have (its locals, and every name its function's
    source mentions, which includes the module globals it uses).
    """
    try:
        tree = ast.parse(textwrap.dedent(code))
    except SyntaxError:
        return {}
    free = loaded(tree) - bound_names(tree, nested=True) - known - set(dir(builtins))
    return {name: _ALIASES.get(name, name) for name in sorted(free) if name in _ALIASES or _is_stdlib(name)}


def _is_stdlib(name: str) -> bool:
    return name in sys.stdlib_module_names and not name.startswith("_")


def import_in_action(code: str, modules: dict[str, str]) -> str:
    """An action importing `modules` under private names, released at its end.

    An action's new names become the module's globals; importing `os` as `os` would replace
    whatever the user's module calls `os`, so the action uses `_daifu_os` and deletes it.
    """
    for name in modules:
        code = "".join(wrap_name(name, f"_daifu_{name}")(code))
    head = [f"import {module} as _daifu_{name}" for name, module in modules.items()]
    tail = f"del {', '.join(f'_daifu_{name}' for name in modules)}"
    return "\n".join(head + [code.rstrip("\n"), tail])


def import_in_lines(code: str, modules: dict[str, str]) -> str:
    """New lines of a function, with the imports they need (local to the function): before them, or,
    when they are a whole function (its decorators first), just before its first statement that uses
    one, at that statement's indentation (so a change inside one block stays inside it)."""
    lines = code.split("\n")
    at = _first_use(code, set(modules))
    indent = " " * (_indent(lines[at : at + 1]) if at is not None else _indent(lines))
    imports = [f"{indent}import {m}" if m == n else f"{indent}import {m} as {n}" for n, m in modules.items()]
    at = at or 0
    return "\n".join(lines[:at] + imports + lines[at:])


def _first_use(code: str, names: set[str]) -> int | None:
    """When `code` is one whole function: the index of the line of its first statement that reads one
    of `names` (a compound statement by its header); else `None`."""
    try:
        tree = ast.parse(textwrap.dedent(code))
    except SyntaxError:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    users = [
        node.lineno
        for node in ast.walk(tree.body[0])
        if isinstance(node, ast.stmt) and node is not tree.body[0] and names & _header_reads(node)
    ]
    return min(users) - 1 if users else None


def _header_reads(statement: ast.stmt) -> set[str]:
    """The names a statement reads itself: a compound statement's header, not its blocks."""
    found: set[str] = set()
    todo: list[ast.AST] = [child for child in ast.iter_child_nodes(statement) if not isinstance(child, ast.stmt)]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            found.add(node.id)
        todo += [child for child in ast.iter_child_nodes(node) if not isinstance(child, ast.stmt)]
    return found


def indent_first_line(code: str) -> str | None:
    """`code` with its first line at the indentation of the lines after it, when it came at column 0
    and they are all indented (a JSON string that starts right after its quote); `None` otherwise.

    Only a reading to try when `code` as given does not fit: a first line that opens a block
    (`if x:`) rightly has its body indented below it.
    """
    lines = code.split("\n")
    rest = [line for line in lines[1:] if line.strip()]
    if not lines or not lines[0].strip() or lines[0][:1].isspace() or not rest or _indent(rest) == 0:
        return None
    return "\n".join([" " * _indent(rest) + lines[0]] + lines[1:])


def parses(source: str) -> bool:
    try:
        ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return False
    return True
