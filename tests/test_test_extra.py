"""The `test` extra installs every package the suite imports: a fresh environment made from it alone passes.

A package the suite needs that no extra names passes wherever a developer happened to have it and fails on
a fresh machine (`requests`, imported by a hostile payload, was such a package). The check reads every
import the suite can run: the test files, the programs they launch (`examples/`, `DLFailureBenchmark/`),
and the code held in their strings (payloads, generated programs, notebook cells) — then asks that each
third-party module's distribution be named by the `test` extra, directly or through `daifu[...]`.
PyTorch is the one exception: the README's command installs it beside the extra.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUN_BY_TESTS = ("tests", "examples", "DLFailureBenchmark")
"""The folders whose code the suite imports or launches (`benchmarks/` is not run by it)."""
WRITTEN_BY_TESTS = {"trainer"}
"""Modules a test writes into its temporary folder and imports from there (tests/test_warm.py)."""
INSTALLED_BESIDE = {"torch"}
"""Installed by the README's command next to the extra, never by an extra (tests/test_readme.py)."""
OPTIONAL = {"frameworks": "tests/programs/frameworks/"}
"""Extras the `test` extra leaves out (CI installs them apart), and the one folder whose programs may
import what they name: tests/test_frameworks.py runs those programs, and skips when one is missing."""


def _imported(tree: ast.AST) -> Iterator[str]:
    """Top-level names of the modules `tree` imports, by statement or by a call with a literal name."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if called in ("__import__", "import_module", "importorskip") and isinstance(node.args[0].value, str):
                yield node.args[0].value.split(".")[0]


def _code_in_strings(tree: ast.AST) -> Iterator[ast.AST]:
    """The Python held in `tree`'s string literals (programs the tests write, run or send)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "import" in node.value:
            for text in (node.value, textwrap.dedent(node.value)):
                try:
                    yield ast.parse(text)
                    break
                except (SyntaxError, ValueError):
                    continue


def _local_names() -> set[str]:
    """Modules and packages of this repository, importable by their own name from some folder of it."""
    names = {path.stem for folder in RUN_BY_TESTS for path in (ROOT / folder).rglob("*.py")}
    names |= {path.name for folder in RUN_BY_TESTS for path in (ROOT / folder).rglob("*") if path.is_dir()}
    return names | {"daifu", "repairbot", "tests", "examples", "DLFailureBenchmark", "benchmarks"}


@functools.cache
def third_party_imports() -> dict[str, set[str]]:
    """Each third-party top-level module the suite may import, with the files that import it (read once:
    parsing every file and every string of code in them takes seconds)."""
    local, found = _local_names(), {}
    for folder in RUN_BY_TESTS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for module_tree in (tree, *_code_in_strings(tree)):
                for name in _imported(module_tree):
                    if name not in sys.stdlib_module_names and name not in local | WRITTEN_BY_TESTS:
                        found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def _normalized(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


@functools.cache
def _installed() -> dict[str, list[str]]:
    """Each importable top-level module with the distributions installing it: reading every installed
    distribution's metadata takes a second, once, not once per module."""
    return dict(importlib.metadata.packages_distributions())


def _distribution_of(module: str) -> str:
    """The distribution that installs `module`: from the installed metadata, else its own name."""
    installed = _installed().get(module)
    return _normalized(installed[0] if installed else module)


def extra_names(extra: str = "test") -> set[str]:
    """The distributions `daifu[<extra>]` names, following `daifu[...]` through the other extras."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 and later
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names: set[str] = set()
    pending = [extra]
    while pending:
        for requirement in extras[pending.pop()]:
            name = re.match(r"[A-Za-z0-9._-]+", requirement)
            assert name, requirement
            if name.group(0) == "daifu":
                pending += re.findall(r"\w+", requirement.split("[", 1)[1])
            else:
                names.add(_normalized(name.group(0)))
    return names



def test_the_scan_sees_imports_in_code_and_in_strings() -> None:
    found = third_party_imports()
    assert "tests/test_notebook.py" in found["nbformat"]  # `pytest.importorskip("nbformat")`
    assert "tests/hostile_payloads.py" in found["requests"]  # inside a payload's source
    assert "examples/distributed_training.py" in found["torch"]


def test_every_package_the_suite_imports_is_in_the_test_extra() -> None:
    missing = {
        module: sorted(files)
        for module, files in third_party_imports().items()
        if module not in INSTALLED_BESIDE and _distribution_of(module) not in extra_names()
        and not _optional(_distribution_of(module), files)
    }
    assert missing == {}, f"imported by the suite, installed by no extra: {missing}"


def _optional(distribution: str, files: set[str]) -> bool:
    """Whether `distribution` comes with an extra of `OPTIONAL`, imported only by that extra's folder."""
    return any(distribution in extra_names(extra) and all(f.startswith(folder) for f in files)
               for extra, folder in OPTIONAL.items())


def test_the_frameworks_are_not_in_the_test_extra() -> None:
    """CI time: the `test` extra pulls no framework; their programs alone import them."""
    assert not extra_names("frameworks") & extra_names()
