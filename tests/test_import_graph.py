"""Which way imports point, read from the source: no cycle, no upward import, in `daifu` and `repairbot`.

`test_layers.py` checks what a fresh interpreter loads; this test reads every module's syntax tree
instead, so an import inside a function (which runs only when the function does) counts as much as
one at the top. Relative imports are resolved; `from package import name` points at
`package.name` when that is a module, else at `package`. Imports under `if TYPE_CHECKING:` are
annotations only: they must point the right way, but never make a cycle (nothing runs them).

The layers, top to bottom, as `docs/architecture.md` draws them: a module may import modules of its
own layer or of a layer below, never above, and the modules of one layer must not import each
other in a cycle. `repairbot` never imports `daifu`; `daifu` imports from `repairbot` only what
`REPAIRBOT_ALLOWED` lists.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("daifu", "repairbot")

DAIFU_LAYERS: tuple[tuple[str, ...], ...] = (
    ("daifu", "daifu.__main__", "daifu.cli"),  # the entry points: the package's public names, the command
    ("daifu.vaccinate", "daifu.targets", "daifu.frameworks"),  # where the runtime meets the layers above it: it assembles them
    ("daifu.console",),  # a person decides
    ("daifu.decide",),  # who decides: the chain, the bot client, the verification stage
    ("daifu.rescue",),  # what is saved of a run nothing repaired
    ("daifu.store",),  # what is kept
    ("daifu.report",),  # what the bot sees
    ("daifu.core",),  # the mechanism
    ("daifu.config", "daifu.state", "daifu.say", "daifu.ranks", "daifu.environ", "daifu.repair"),  # foundation
)
"""`daifu`'s layers, highest first; every module of `daifu` belongs to exactly one."""

REPAIRBOT_ALLOWED: dict[str, tuple[str, ...]] = {
    "daifu": ("repairbot.protocol",),
    "daifu.decide.botclient": ("repairbot.backends.rules",),  # the in-process rules engine, without a service
    "daifu.decide.giving_up": ("repairbot.giving_up",),  # what a repair gives up, read as the generator reads it
    "daifu.cli.main": ("repairbot.server",),  # `daifu serve`
    "daifu.cli.demo": ("repairbot.server",),  # the demo serves the bot on a loopback port
}
"""What `daifu` may import from `repairbot`: by module prefix of the importer. The wire protocol from the
layers that talk to the bot (never the core or the foundation, which load no pydantic)."""
NO_PROTOCOL = ("daifu.core", "daifu.config", "daifu.state", "daifu.say", "daifu.ranks", "daifu.environ",
               "daifu.repair")


@dataclass(frozen=True)
class Import:
    """One import statement's target, where it is, and whether it runs (`typing` is `False` under TYPE_CHECKING)."""

    source: str
    target: str
    line: int
    typing: bool


def modules() -> dict[str, Path]:
    """Every module of both packages, by dotted name (a package by its own name)."""
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _statements(tree: ast.AST, typing: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement under `tree`, at any depth, with whether it is under `if TYPE_CHECKING:`."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, typing
        elif isinstance(child, ast.If) and _type_checking(child):
            for part in child.body:
                yield from _statements(ast.Module(body=[part], type_ignores=[]), True)
            for part in child.orelse:
                yield from _statements(ast.Module(body=[part], type_ignores=[]), typing)
        else:
            yield from _statements(child, typing)


def _targets(name: str, path: Path, node: ast.Import | ast.ImportFrom, known: dict[str, Path]) -> list[str]:
    """The modules of both packages that `node` (in module `name`, file `path`) imports."""
    if isinstance(node, ast.Import):
        wanted = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
            package = package[: len(package) - (node.level - 1)]
            base = ".".join(package + ([base] if base else []))
        wanted = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
    found = []
    for target in wanted:
        parts = target.split(".")
        while parts and ".".join(parts) not in known:  # `import a.b.c` of a name in a.b: the module a.b
            parts.pop()
        if parts and ".".join(parts) != name:
            found.append(".".join(parts))
    return found


@functools.cache
def imports() -> tuple[Import, ...]:
    """Every import from a module of `daifu` or `repairbot` of another module of theirs (read once for the
    file's tests: parsing both packages takes seconds)."""
    known = modules()
    found: list[Import] = []
    for name, path in sorted(known.items()):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node, typing in _statements(tree):
            found += [Import(name, target, node.lineno, typing) for target in _targets(name, path, node, known)]
    return tuple(found)


def layer(module: str) -> int:
    """The index of `module`'s layer in `DAIFU_LAYERS` (0 is the top)."""
    best = None
    for index, prefixes in enumerate(DAIFU_LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + ".") and prefix != "daifu":
                if best is None or len(prefix) > best[1]:
                    best = (index, len(prefix))
    assert best is not None, f"{module} is in no layer of DAIFU_LAYERS: place it there and in docs/architecture.md"
    return best[0]


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle_in_either_package() -> None:
    edges: dict[str, set[str]] = {name: set() for name in modules()}
    for found in imports():
        if not found.typing:
            edges[found.source].add(found.target)
    assert cycles(edges) == []


def test_daifu_imports_point_down_its_layers() -> None:
    upward = [
        f"{i.source}:{i.line} imports {i.target}"
        for i in imports()
        if i.source.startswith("daifu") and i.target.startswith("daifu") and layer(i.target) < layer(i.source)
    ]
    assert upward == []


def test_repairbot_never_imports_daifu() -> None:
    reaching = [f"{i.source}:{i.line}" for i in imports() if i.source.startswith("repairbot")
                and i.target.startswith("daifu")]
    assert reaching == []


def test_daifu_imports_from_repairbot_only_what_is_allowed() -> None:
    def allowed(found: Import) -> bool:
        if found.source.startswith(NO_PROTOCOL) or found.source in ("daifu",):
            return False
        return any(
            (found.source == importer or found.source.startswith(importer + ".") or importer == "daifu")
            and any(found.target == target or found.target.startswith(target + ".") for target in targets)
            for importer, targets in REPAIRBOT_ALLOWED.items()
        )

    reaching = [f"{i.source}:{i.line} imports {i.target}" for i in imports()
                if i.source.startswith("daifu") and i.target.startswith("repairbot") and not allowed(i)]
    assert reaching == []


def test_the_graph_reader_sees_function_level_and_relative_imports(tmp_path: Path) -> None:
    """The reader itself: an import inside a function, a relative one and a TYPE_CHECKING one are all seen."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import sibling\n"
        "if TYPE_CHECKING:\n    from daifu.core import crash\n"
        "def f():\n    from daifu.console import session\n"
    )
    tree = ast.parse(source)
    known = {"daifu.decide.chain": tmp_path, "daifu.decide.sibling": tmp_path, "daifu.core.crash": tmp_path,
             "daifu.console.session": tmp_path}
    found = [(t, typing) for node, typing in _statements(tree)
             for t in _targets("daifu.decide.chain", tmp_path / "chain.py", node, known)]
    assert found == [("daifu.decide.sibling", False), ("daifu.core.crash", True), ("daifu.console.session", False)]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert layer("daifu.console.session") < layer("daifu.decide.chain") < layer("daifu.core.crash")
