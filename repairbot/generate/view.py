"""What the candidate generator sees of a crash: the faulty statement as a syntax tree, in its function.

A `View` is one place a repair can be made: the vaccinated function (edits become surgeries, and
actions run there) or the deepest user callee whose source the report carries (edits become a
`patch_function`). It parses the function once and answers the questions every family of edits
asks: which names the statement reads, what the report knows about each (`facts`), which block
and loop the statement is in, which earlier statement of the block assigned a name, which names a
loop carries from one iteration to the next.
"""

from __future__ import annotations

import ast
import builtins
import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from repairbot.protocol import CrashReport, Variable
from repairbot.names import bound_names
from repairbot.signs import parse

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_BUILTIN_NAMES = frozenset(dir(builtins))


@dataclass
class FunctionSite:
    """One function a repair can change: its source as in the file, where it crashed, its live values.

    target: `None` for the vaccinated function (a surgery), else the `patch_function` target.
    """

    source: str
    first_lineno: int
    lineno: int
    variables: dict[str, Variable]
    qualname: str
    kind: str = "statement"
    target: str | None = None


@dataclass
class View:
    """The crash seen from one site (see the module docstring)."""

    report: CrashReport
    site: FunctionSite
    parents: dict[int, tuple[ast.AST, str]] = field(default_factory=dict, repr=False)

    # -- the crash ------------------------------------------------------------------------------

    @cached_property
    def message(self) -> str:
        """The exception's message and those chained to it (bounded by the caller's `bounded_report`)."""
        e = self.report.exception
        return "\n".join([e.message] + [link.message for link in e.chain])

    @cached_property
    def exception_types(self) -> set[str]:
        e = self.report.exception
        return {e.type} | {link.type for link in e.chain}

    def says(self, pattern: str | re.Pattern[str]) -> re.Match[str] | None:
        """The message matched against `pattern`, ignoring case. A family's fixed patterns are compiled
        with `re.IGNORECASE` when its module loads (off the crash's path, by `daifu.decide.warm`): each
        compiled at a first crash cost that crash a few milliseconds."""
        if isinstance(pattern, re.Pattern):
            return pattern.search(self.message)
        return re.search(pattern, self.message, re.IGNORECASE)

    @property
    def outermost(self) -> bool:
        """Whether this is the vaccinated function (where actions run)."""
        return self.site.target is None

    # -- the function and the statement ---------------------------------------------------------

    @cached_property
    def lines(self) -> list[str]:
        return self.site.source.splitlines(keepends=True)

    @cached_property
    def margin(self) -> int:
        """Characters `textwrap.dedent` takes off each line of code (a method's indentation)."""
        dedented = textwrap.dedent(self.site.source)
        first = next((line for line in self.lines if line.strip()), "")
        first_dedented = next((line for line in dedented.splitlines(keepends=True) if line.strip()), "")
        return len(first) - len(first_dedented)

    @cached_property
    def tree(self) -> ast.Module | None:
        tree = parse(textwrap.dedent(self.site.source)) if self.site.source else None
        if tree is None or len(tree.body) != 1 or not isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        for parent in ast.walk(tree):
            for name, value in ast.iter_fields(parent):
                children = value if isinstance(value, list) else [value]
                for child in children:
                    if isinstance(child, ast.AST):
                        self.parents[id(child)] = (parent, name)
        return tree

    @property
    def fdef(self) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        tree = self.tree
        return tree.body[0] if tree is not None else None  # type: ignore[return-value]

    @cached_property
    def statement(self) -> ast.stmt | None:
        """The faulty statement (for a header that raised, the compound statement)."""
        fdef = self.fdef
        if fdef is None:
            return None
        line = self.site.lineno - self.site.first_lineno + 1
        found = [
            node
            for node in ast.walk(fdef)
            if isinstance(node, ast.stmt) and node is not fdef and node.lineno == line and self._own(node)
        ]
        simple = [node for node in found if not _compound(node)]
        if self.site.kind == "statement" and simple:
            return simple[-1]
        return found[-1] if found else None

    def _own(self, node: ast.AST) -> bool:
        """Whether `node` belongs to the function's own scope (not a nested def, lambda or class)."""
        current = node
        while id(current) in self.parents:
            current = self.parents[id(current)][0]
            if isinstance(current, _SCOPES) and current is not self.fdef:
                return False
        return True

    @cached_property
    def roots(self) -> list[ast.AST]:
        """The expressions the faulty statement evaluates: the whole statement, or a compound's header."""
        node = self.statement
        if node is None:
            return []
        if not _compound(node):
            return [node]
        if isinstance(node, (ast.For, ast.AsyncFor)):
            return [node.iter]
        if isinstance(node, (ast.If, ast.While)):
            return [node.test]
        if isinstance(node, (ast.With, ast.AsyncWith)):
            return [item.context_expr for item in node.items]
        return []

    def walk(self) -> Iterator[ast.AST]:
        """Every node the faulty statement evaluates, outside nested lambdas and comprehensions' own scopes."""
        for root in self.roots:
            yield from ast.walk(root)

    @cached_property
    def reads(self) -> list[str]:
        """Names the statement reads, in order of first appearance, each once."""
        seen: dict[str, None] = {}
        for node in sorted(
            (n for n in self.walk() if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)),
            key=lambda n: (n.lineno, n.col_offset),
        ):
            seen.setdefault(node.id, None)
        return list(seen)

    def name_nodes(self, name: str) -> list[ast.Name]:
        """The statement's reads of `name`."""
        return [n for n in self.walk() if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]

    @cached_property
    def source_names(self) -> set[str]:
        """Every name the function's source mentions (to tell a new name from an existing one)."""
        fdef = self.fdef
        if fdef is None:
            return set()
        found = {n.id for n in ast.walk(fdef) if isinstance(n, ast.Name)}
        found |= {a.arg for a in ast.walk(fdef) if isinstance(a, ast.arg)}
        return found

    def fresh(self, wanted: str) -> str:
        """`wanted`, or `wanted` with a number, so that it is a name the function does not use yet."""
        taken = self.source_names | set(self.site.variables) | _BUILTIN_NAMES
        name, number = wanted, 2
        while name in taken:
            name, number = f"{wanted}{number}", number + 1
        return name

    def uses_module(self, name: str) -> bool:
        """Whether the function reaches a module by `name` (it reads `name.attr` and `name` is no local)."""
        fdef = self.fdef
        if fdef is None or name in self.site.variables:
            return False
        return any(
            isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == name
            for n in ast.walk(fdef)
        )

    # -- values ---------------------------------------------------------------------------------

    def variable(self, name: str) -> Variable | None:
        return self.site.variables.get(name)

    def facts(self, name: str) -> dict[str, Any]:
        variable = self.site.variables.get(name)
        return variable.facts if variable is not None else {}

    def type_of(self, name: str) -> str | None:
        variable = self.site.variables.get(name)
        return variable.type if variable is not None else None

    def is_tensor(self, name: str) -> bool:
        return self.type_of(name) == "Tensor"

    def is_module(self, name: str) -> bool:
        """Whether `name` holds a `torch.nn.Module` (its summary counts parameters)."""
        return "parameters" in self.facts(name) and "class" in self.facts(name)

    def modules(self) -> dict[str, dict[str, Any]]:
        return {name: v.facts for name, v in self.site.variables.items() if self.is_module(name)}

    # -- blocks and loops -----------------------------------------------------------------------

    def parent(self, node: ast.AST) -> ast.AST | None:
        found = self.parents.get(id(node))
        return found[0] if found else None

    def block(self, node: ast.stmt | None = None) -> tuple[list[ast.stmt], int] | None:
        """The statement list holding `node` (the faulty statement by default), and its index there."""
        node = node or self.statement
        if node is None or id(node) not in self.parents:
            return None
        parent, name = self.parents[id(node)]
        statements = getattr(parent, name, None)
        if not isinstance(statements, list):
            return None
        for index, item in enumerate(statements):
            if item is node:
                return statements, index
        return None

    def loops(self) -> list[ast.For | ast.AsyncFor | ast.While]:
        """The loops around the faulty statement, innermost first (the header of a `for` that raised
        is not inside its own loop)."""
        found: list[Any] = []
        node: ast.AST | None = self.statement
        while node is not None and node is not self.fdef:
            parent = self.parent(node)
            if isinstance(parent, _SCOPES):
                break
            if isinstance(parent, _LOOPS) and node in parent.body:
                found.append(parent)
            node = parent
        return found

    def in_loop(self) -> bool:
        return bool(self.loops())

    def earlier_assignment(self, name: str) -> ast.Assign | ast.AnnAssign | None:
        """The last statement before the faulty one, in its own block, that assigns `name` alone
        (`name = ...`): the fix is often there, a line up, and resuming from it runs it again."""
        found = self.block()
        if found is None:
            return None
        statements, index = found
        for node in reversed(statements[:index]):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return node if len(node.targets) == 1 else None
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
                return node if node.value is not None else None
            if name in bound_names(node):
                return None  # assigned some other way (a tuple, a loop): not a one-value fix
        return None

    def assigned_in_iteration(self, name: str) -> bool:
        """Whether the innermost loop's body (or its target) assigns `name`: a value of this iteration
        (a batch), not one the loop carries unchanged (a buffer made before it)."""
        loops = self.loops()
        if not loops:
            return False
        loop = loops[0]
        targets = assigned_target(loop.target) if isinstance(loop, (ast.For, ast.AsyncFor)) else set()
        return name in targets or any(name in bound_names(node) for node in loop.body)

    def carried(self) -> list[str]:
        """Names the innermost loop carries between iterations: read in its body before any
        unconditional assignment there, and assigned in it (a recurrent state, a running total)."""
        loops = self.loops()
        if not loops:
            return []
        body = loops[0].body
        settled: set[str] = set()
        carried: dict[str, None] = {}
        assigned_anywhere = {name for node in body for name in bound_names(node)}
        for node in body:
            for read in _reads_in_order(node):
                if read not in settled and read in assigned_anywhere:
                    carried.setdefault(read, None)
            if not _compound(node):
                settled |= bound_names(node)
        return list(carried)

    def first_read(self, name: str) -> ast.stmt | None:
        """The first statement of the faulty statement's block that reads `name` (possibly itself)."""
        found = self.block()
        if found is None:
            return None
        statements, index = found
        for node in statements[: index + 1]:
            if name in _reads_in_order(node):
                return node
        return None


def _compound(node: ast.AST) -> bool:
    return isinstance(node, ast.stmt) and any(
        isinstance(getattr(node, name, None), list) and getattr(node, name) for name in ("body", "handlers", "cases")
    )


def assigned_target(target: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def _reads_in_order(node: ast.AST) -> list[str]:
    """The names `node` reads, in source order (an assignment's value before its targets)."""
    reads = [n for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
        return [node.target.id] + [n.id for n in reads]
    return [n.id for n in sorted(reads, key=lambda n: (n.lineno, n.col_offset))]


def sites(report: CrashReport) -> list[FunctionSite]:
    """Where a repair of `report` can be made: the vaccinated function, and the deepest user callee
    whose source the report carries and whose function can be reached by name (`patch_function`)."""
    f = report.function
    found = []
    if f.source:
        found.append(FunctionSite(f.source, f.first_lineno, f.lineno, report.variables, f.qualname, f.kind))
    for frame in reversed(report.frames[1:]):
        if frame.library or not frame.source or frame.first_lineno is None or not frame.own_def:
            continue  # a comprehension's frame: its function's is further up
        if "<locals>" not in frame.qualname and frame.module:
            target = f"sys.modules[{frame.module!r}].{frame.qualname}"
            found.append(FunctionSite(frame.source, frame.first_lineno, frame.lineno, frame.locals, frame.qualname,
                                      target=target))
        break
    return found
