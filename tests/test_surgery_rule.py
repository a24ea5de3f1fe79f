"""The surgery rule (`daifu.core.surgery`): where a surgery's run resumes (`resume_path`: statements
are matched by their trees, so a statement that is only reformatted is no change, and one that
changed is run from its start), and which names the new source may read (`unknown_names`)."""

from __future__ import annotations

import ast
import random
from collections import Counter
from dataclasses import replace
import textwrap

import pytest

from daifu.core.blocks import Path, annotate, block_of, child_blocks, iteration_start, locate, node_at, path_of
from daifu.core.rewrite import number_finals
from daifu.core.source import normalize, parse_function
from daifu.core.changes import Change
from daifu.core.splice import splice
from daifu.core.surgery import SurgeryRefused, refusals, resume_path
from daifu.core.version import Version, build_version
from tests.programgen import ProgramGenerator

OLD = textwrap.dedent('''\
    def train(steps, log):
        total = 0
        for step in range(steps):
            x = step * 2
            log.append(x)
            y = x + 1
            log.append(total)
            total += y
        return total
''')


def mapped(new: str, faulty: str = "log.append(total)", old: str = OLD) -> tuple[str, bool]:
    """The new statement where a run interrupted at `faulty` resumes, and whether it is its counterpart."""
    old_version = build_version(0, old, 1, "t.py", 0, (), fast=False)
    new_version = build_version(1, textwrap.dedent(new), 1, "t.py", 0, (), fast=False)
    line = next(n for n, text in enumerate(old.splitlines(), 1) if text.strip() == faulty)
    found = locate(old_version.fdef.body, line, None)
    assert found is not None
    path, same, _finals = resume_path(old_version, new_version, path_of(found[0]))
    statement = node_at(new_version.fdef, path)
    return new_version.statement_text(statement, header_only=True), same


def test_an_unchanged_function_resumes_at_the_faulty_statement() -> None:
    assert mapped(OLD) == ("log.append(total)", True)


@pytest.mark.parametrize("reformatted", [
    "            log.append( x )\n",
    "            log.append(x)  # noted\n",
    "            log.append((x))\n",
    "            log.append(\n                x,\n            )\n",
])
def test_a_statement_only_reformatted_before_the_faulty_one_is_not_run_again(reformatted: str) -> None:
    new = OLD.replace("        log.append(x)\n", reformatted.replace("            ", "        ", 1))
    assert new != OLD
    assert mapped(new) == ("log.append(total)", True)


def test_a_reformatted_enclosing_loop_header_still_holds_the_run() -> None:
    new = OLD.replace("for step in range(steps):", "for step in range( steps ):  # all of them")
    assert mapped(new) == ("log.append(total)", True)


def test_a_changed_line_above_the_faulty_one_runs_from_there() -> None:
    new = OLD.replace("y = x + 1", "y = x + 2")
    assert mapped(new) == ("y = x + 2", False)


def test_a_changed_faulty_statement_runs_in_its_new_form() -> None:
    new = OLD.replace("log.append(total)", "log.extend([total])")
    assert mapped(new) == ("log.extend([total])", False)


def test_a_statement_added_after_the_faulty_one_changes_nothing_before() -> None:
    new = OLD.replace("        total += y\n", "        total += y\n        log.append(y)\n")
    assert mapped(new) == ("log.append(total)", True)


def test_a_removed_statement_after_the_faulty_one_changes_nothing_before() -> None:
    new = OLD.replace("        total += y\n", "")
    assert mapped(new) == ("log.append(total)", True)


def test_a_new_try_around_the_faulty_statement_runs_from_the_try() -> None:
    # The rest of the block still matches: the `try` is a new statement in its place, run from its
    # start, and the faulty statement is its first.
    new = OLD.replace("        log.append(total)\n",
                      "        try:\n            log.append(total)\n        except TypeError:\n            pass\n")
    assert mapped(new) == ("try:", False)


def test_a_new_try_around_the_whole_block_is_entered() -> None:
    body = [line for line in OLD.splitlines(keepends=True) if line.startswith("        ")]
    wrapped = "        try:\n" + "".join("    " + line for line in body)
    wrapped += "        except TypeError:\n            pass\n"
    new = OLD.replace("".join(body), wrapped)
    assert mapped(new) == ("log.append(total)", True)


def test_a_changed_enclosing_loop_header_is_refused() -> None:
    new = OLD.replace("for step in range(steps):", "for step in range(steps + 1):")
    with pytest.raises(SurgeryRefused, match="header of the enclosing `for`"):
        mapped(new)


def test_statements_of_the_same_kind_as_a_changed_one_are_matched_by_their_trees() -> None:
    # The assignment above the faulty statement is reformatted while another assignment changes
    # after it: both are `Assign`s, so both are compared by tree, and only the later one differs.
    new = OLD.replace("x = step * 2", "x = step*2").replace("total += y", "total += y * 1")
    assert mapped(new) == ("log.append(total)", True)


def test_a_statement_reformatted_into_the_text_of_another_is_still_itself() -> None:
    # The second call's new text is the first one's, which both versions have: the two are still
    # told apart by tree, so neither is run again.
    old = ("def f(log):\n    for i in range(3):\n        log.append(i)\n        log.append( i )\n"
           "        log.append(len(log))\n")
    new = old.replace("log.append( i )", "log.append(i)")
    assert mapped(new, "log.append(len(log))", old) == ("log.append(len(log))", True)


# -- the names a surgery reads ------------------------------------------------------------------

BASE = "def step(batch, log):\n    total = 0\n    for item in batch:\n        total += item\n    log.append(total)\n"


def refused_names(new_body: str, known: tuple[str, ...] = ()) -> list[str]:
    """Why a surgery whose `for` body is `new_body` (one line) would be refused, given module names `known`."""
    new = BASE.replace("        total += item\n", f"        {new_body}\n")
    return refusals(BASE, 1, "t.py", new, 4, known)


def test_a_surgery_reading_names_the_function_assigns_builtins_and_globals_is_admitted() -> None:
    assert refused_names("total += abs(item) + scale", known=("scale",)) == []


def test_a_name_nothing_defines_is_named() -> None:
    assert refused_names("total += item * scale") == [
        "the new source reads 'scale', which nothing defines (not assigned in the new function, not a "
        "parameter, a module global or a builtin)"
    ]


GUARDED = ("def step(batch, log):\n    total = 0\n    for item in batch:\n        if LOGGING:\n"
           "            service.log(item)\n        total += item\n    log.append(total)\n")
"""A function that reads `service` only on a branch not taken: nothing defines it unless logging is on."""


@pytest.mark.parametrize("changed", [
    "total += abs(item)",  # another line: the change does not touch the name
    "total += item if service is None else 0",  # a new read of it: the old code read it as well
])
def test_a_name_the_crashed_version_already_read_is_not_the_surgerys_to_define(changed: str) -> None:
    # Python's business, as in the plain program: a NameError if the branch that reads it runs.
    new = GUARDED.replace("total += item", changed)
    assert refusals(GUARDED, 1, "t.py", new, 6, ("LOGGING",)) == []
    assert "'scale'" in refusals(GUARDED, 1, "t.py", new.replace("total += ", "total += scale + "), 6, ("LOGGING",))[0]


def test_a_name_that_was_a_local_is_a_new_read_when_the_surgery_unbinds_it() -> None:
    old = "def f(xs):\n    scale = 2\n    for x in xs:\n        g(x * scale)\n"
    assert refusals(old, 1, "t.py", old.replace("scale = 2", "pass"), 4, ("g",)) == [
        "the new source reads 'scale', which nothing defines (not assigned in the new function, not a "
        "parameter, a module global or a builtin)"
    ]


@pytest.mark.parametrize("body", [
    "total += sum(x * scale for x in [item])",
    "total += (lambda: item * scale)()",
    "total += [x for x in [item] if x < scale][0]",
])
def test_names_read_inside_nested_code_count(body: str) -> None:
    assert "'scale'" in refused_names(body)[0]


def test_a_lambda_parameter_does_not_define_the_name_outside_the_lambda() -> None:
    assert "'scale'" in refused_names("total += (lambda scale: scale)(item) + scale")[0]


def test_a_name_the_function_declares_global_and_assigns_is_defined() -> None:
    new = BASE.replace("    total = 0\n", "    global seen\n    seen = 0\n    total = 0\n").replace(
        "        total += item\n", "        total += item + seen\n")
    assert refusals(BASE, 1, "t.py", new, 5, ()) == []


def test_a_class_body_reads_what_it_assigns() -> None:
    new = BASE.replace("        total += item\n", "        class Box:\n            a = 1\n            b = a + 1\n        total += item * Box.b\n")
    assert refusals(BASE, 1, "t.py", new, 4, ()) == []
    missing = new.replace("b = a + 1", "b = a + scale")
    assert "'scale'" in refusals(BASE, 1, "t.py", missing, 4, ())[0]


def test_names_past_the_256th_are_read_with_their_extended_index() -> None:
    # 300 attribute names fill the code's name table, so the globals read after them have indexes past 255.
    filler = " + ".join(f"log.a{n}" for n in range(300))
    body = f"total += ({filler}) if log is None else item * scale"
    assert "'scale'" in refused_names(body)[0]
    assert refused_names(body, known=("scale",)) == []


def test_decorators_and_annotations_are_not_the_surgerys_reads() -> None:
    old = "@deco\ndef step(batch: Batch, log):\n    total = 0\n    for item in batch:\n        total += item\n    log.append(total)\n"
    new = old.replace("total += item", "total += item * 2")
    assert refusals(old, 1, "t.py", new, 5, ("deco",)) == []


# -- a small change's version, derived from the old one -------------------------------------------

REPLACEMENTS = [
    "a = (a + 1) % 7", "b = a", "trace.append(len(kept))", "pass", "a, *rest = [a, b]", "fresh = a",
    "trace.append(math.pi)", "kept.append(lambda: a)", "trace.append([a for _ in range(2)])", "del b",
    "a += undefined_name", "import os", "global a", "trace.append(b) if a else None", "# only a comment",
    "undefined_name = a", "fresh: int = 3", "math = a", "trace = list(trace)", "(other := a)",
    "b = a; trace.append(b)", "pass  # a comment beside a statement",
]
"""Statements a surgery's line may become: some keep the scope (derived), some do not (compiled)."""


def _edits(source: str, rng: random.Random) -> list[str]:
    """Surgeries of `source`: a simple statement's line replaced, a line inserted after it, or removed."""
    lines = source.splitlines(keepends=True)
    simple = [i for i, line in enumerate(lines)
              if line.startswith("    ") and not line.rstrip().endswith(":") and "return" not in line]
    edits = []
    for index in rng.sample(simple, min(3, len(simple))):
        indent = lines[index][: len(lines[index]) - len(lines[index].lstrip())]
        new_line = indent + rng.choice(REPLACEMENTS) + "\n"
        edits.append("".join(lines[:index] + [new_line] + lines[index + 1 :]))
        edits.append("".join(lines[: index + 1] + [new_line] + lines[index + 1 :]))
        edits.append("".join(lines[:index] + lines[index + 1 :]))
    return edits


def _same(got: Version, expected: Version, source: str) -> None:
    """`got`, derived, has the scope and module reads of `expected`, compiled as written."""
    ours, theirs = got.scope, expected.scope
    assert (set(ours.plain_locals), ours.cell_names, ours.own_cells, ours.finals, ours.receiver) == (
        set(theirs.plain_locals), theirs.cell_names, theirs.own_cells, theirs.finals, theirs.receiver
    ), source
    assert [ast.dump(d) for d in ours.declared] == [ast.dump(d) for d in theirs.declared]
    # Never fewer names than the compiler reads; more only for code it drops as unreachable
    # (`raise ValueError(2)` then a new statement): names the new source does read.
    loads = [n for n in ast.walk(got.fdef) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    read = {n.id for n in loads}
    assert expected.module_reads() <= got.module_reads() <= expected.module_reads() | read, source
    # The same with each read's line, which the next surgery's derivation goes by.
    lines, ours_lines = set(expected.module_names.reads), set(got.module_names.reads)
    assert lines <= ours_lines <= lines | {(n.id, n.lineno) for n in loads}, source
    assert got.plain_code.co_varnames == expected.plain_code.co_varnames
    assert (got.shared_lines, got.nesting) == (expected.shared_lines, expected.nesting), source


def _same_resume_paths(old: Version, got: Version, expected: Version, source: str) -> None:
    """A run interrupted anywhere in `old` resumes at the same place of `got` (derived: its paths
    are worked out from the change) as of `expected` (the same source, parsed: matched block by block)."""
    for _line, path, _final in _stamped(old.fdef)[::3]:  # a third of them: the full matching is slow
        assert resume_path(old, got, path) == resume_path(old, expected, path), (source, path)


@pytest.mark.parametrize("new_line", ["        y = x  # noted", "        y = (x)", "        y = x + 0"])
def test_a_derived_resume_path_is_the_one_matching_the_blocks_gives(new_line: str) -> None:
    old = "def f(xs):\n    for x in xs:\n        y = x\n        g(y)\n    return xs\n"
    new = old.replace("        y = x", new_line)
    got, expected = _derive(old, new)
    assert got.derived_from is not None and expected.derived_from is None
    for _line, path, _final in _stamped(got.derived_from.fdef):
        assert resume_path(got.derived_from, got, path) == resume_path(got.derived_from, expected, path), path
    # A crash at the loop's header resumes there, its own counterpart: the loop goes on with its iterator.
    assert resume_path(got.derived_from, got, (0,)) == ((0,), True, {})


@pytest.mark.parametrize("seeds, least", [
    pytest.param(range(30), (45, 40), id="sample"),
    pytest.param(range(120), (150, 100), id="all", marks=pytest.mark.e2e),
])
def test_a_version_derived_from_the_old_one_has_the_scope_and_reads_compiling_it_gives(
    seeds: range, least: tuple[int, int],
) -> None:
    """Differential: surgeries of generated functions, four in a row, each built both ways: derived
    from the version before (itself derived or not, `build_version(like=...)`) and compiled as
    written; where it is derived, its scope and module reads must be exactly the compiler's."""
    rng = random.Random(14)
    derived = compiled = refused = 0
    for seed in seeds:
        source = ProgramGenerator(seed).source()
        current = build_version(0, source, 1, "g.py", 0, (), fast=False)
        for number in range(1, 5):
            edits = _edits(source, rng)
            if not edits:
                break
            new_source = rng.choice(edits)
            try:
                expected = build_version(number, new_source, 1, "g.py", 0, (), fast=False)
            except (SyntaxError, ValueError):
                refused += 1
                continue
            got = build_version(number, new_source, 1, "g.py", 0, (), fast=False, like=current)
            if got.plain is None:
                derived += 1
                _same(got, expected, new_source)
                _same_resume_paths(current, got, expected, new_source)
            else:
                compiled += 1
            source, current = new_source, got
    assert derived > least[0] and compiled > least[1], (derived, compiled, refused)


def _derive(old: str, new: str) -> tuple[Version, Version]:
    return (build_version(1, new, 1, "t.py", 0, (), fast=False, like=build_version(0, old, 1, "t.py", 0, (), fast=False)),
            build_version(1, new, 1, "t.py", 0, (), fast=False))


def test_a_surgery_that_removes_a_locals_only_assignment_is_compiled() -> None:
    old = "def f(xs):\n    scale = 2\n    for x in xs:\n        x * scale\n"
    got, expected = _derive(old, old.replace("scale = 2", "pass"))
    assert got.plain is not None and "scale" in expected.module_reads()


def test_a_derived_version_no_longer_reads_what_the_replaced_statement_read() -> None:
    old = "def f(xs):\n    total = 0\n    for x in xs:\n        total += math.floor(x)\n    return total\n"
    got, expected = _derive(old, old.replace("math.floor(x)", "x"))
    assert got.plain is None
    assert got.module_reads() == expected.module_reads() == set()
    got, expected = _derive(old, old.replace("total += math.floor(x)", "total += math.ceil(x) + shift"))
    assert got.plain is None and got.module_reads() == expected.module_reads() == {"math", "shift"}


def test_a_surgery_replacing_a_raise_is_compiled_the_code_after_it_comes_back() -> None:
    # The compiler drops what follows the `raise`: its reads are in no bytecode of the old version.
    old = "def f(xs):\n    for x in xs:\n        raise ValueError(x)\n        x = scale * x\n"
    got, expected = _derive(old, old.replace("raise ValueError(x)", "pass"))
    assert got.plain is not None and "scale" in expected.module_reads()


NAME_ERROR = "def f(xs):\n    total = 0\n    for x in xs:\n        total += x * lr\n    return total\n"
CLASS_ASSIGNS = NAME_ERROR.replace("    return total\n", "    class Box:\n        lr = 1\n    return total\n")


@pytest.mark.parametrize("old, new", [
    (NAME_ERROR, NAME_ERROR.replace("        total += x * lr\n", "        lr = 0.5\n        total += x * lr\n")),
    (NAME_ERROR, NAME_ERROR.replace("total += x * lr", "lr = 0.5; total += x * lr")),
    (NAME_ERROR, NAME_ERROR.replace("    total = 0\n", "    total = lr = 0\n")),
    (CLASS_ASSIGNS, CLASS_ASSIGNS.replace("        total += x * lr\n", "        lr = 0.5\n        total += x * lr\n")),
])
def test_a_name_the_new_statements_bind_becomes_a_local_of_the_derived_version(old: str, new: str) -> None:
    # The usual fix of a NameError: bind the name before the statement that reads it. The read
    # the crashed version made from the module is a local's read in the new one (a class body's
    # own `lr` stays the class's).
    got, expected = _derive(old, new)
    assert got.plain is None, new
    assert set(got.scope.plain_locals) == set(expected.scope.plain_locals) and "lr" in got.scope.plain_locals
    assert got.module_reads() == expected.module_reads() and "lr" not in got.module_reads()


@pytest.mark.parametrize("old, new, why", [
    (NAME_ERROR.replace("total += x * lr", "total += (lambda: x * lr)()"), "        lr = 0.5\n",
     "a lambda reads it: it becomes the lambda's closure variable"),
    (NAME_ERROR.replace("    total = 0\n", "    global lr\n    total = 0\n"), "        lr = 0.5\n",
     "declared global: the new statement assigns the module's name"),
    (NAME_ERROR.replace("    return total\n", "    class Box:\n        rate = lr\n    return total\n"), "        lr = 0.5\n",
     "a class body reads it: it becomes the class body's closure variable"),
])
def test_a_new_name_whose_binding_changes_more_than_one_local_is_compiled(old: str, new: str, why: str) -> None:
    got, expected = _derive(old, old.replace("        total += ", new + "        total += "))
    assert got.plain is not None, why
    assert replace(got.scope, declared=()) == replace(expected.scope, declared=())


def _stamped(fdef: ast.FunctionDef) -> list[tuple[int, Path, int | None]]:
    """Each statement of the function's own blocks: its line, stamped path and `try ... finally` number."""
    found, todo = [], list(fdef.body)
    while todo:
        statement = todo.pop()
        found.append((statement.lineno, path_of(statement), getattr(statement, "_daifu_final", None)))
        todo += [s for _name, block in child_blocks(statement) for s in block]
    return sorted(found)


def _above(old: Version, path: Path, level: int) -> int | None:
    """The position of the simple one-line statement nearest before `path` in its block at `level`
    (the block at `path[:level]`) that a surgery can change on its line; `None` if there is none."""
    block = old.fdef.body if level == 0 else block_of(node_at(old.fdef, path[: level - 1]), path[level - 1])
    for position in reversed(range(path[level])):
        statement = block[position]
        if isinstance(statement, (ast.Expr, ast.Assign, ast.AugAssign)) and statement.lineno == statement.end_lineno:
            return position
    return None


@pytest.mark.parametrize("seeds, least", [
    pytest.param(range(10), (250, 140, 5), id="sample"),
    pytest.param(range(40), (500, 300, 20), id="all", marks=pytest.mark.e2e),
])
def test_a_surgery_above_the_crash_resumes_at_it_at_every_nesting_level(
    seeds: range, least: tuple[int, int, int],
) -> None:
    """Differential: in generated functions, for a run interrupted at each statement, a one-line
    surgery of a statement before it at each level of its path (its own block, each enclosing
    block): the run resumes at the changed statement when that is in the interrupted iteration
    (`iteration_start`: the innermost loop's body, crossing `if`, `with` and `try` without
    `finally`), else at the faulty statement's counterpart; the derived version (`_across`) and
    the parsed one (the block matcher) agree on it."""
    at_change: Counter[int] = Counter()
    kept = derived = 0
    for seed in seeds:
        source = ProgramGenerator(seed).source()
        lines = source.split("\n")
        old = build_version(0, source, 1, "g.py", 0, (), fast=False)
        for _line, path, _final in _stamped(old.fdef)[seed % 2 :: 2]:  # half of them: it takes a while
            top = iteration_start(old.fdef, path)
            for level in range(0, len(path), 2):
                position = _above(old, path, level)
                if position is None:
                    continue
                changed = path[:level] + (position,)
                line = node_at(old.fdef, changed).lineno
                new_source = "\n".join(lines[: line - 1] + [lines[line - 1] + " or 0"] + lines[line:])
                expected = (changed, False) if level >= top else (path, True)
                parsed = build_version(1, new_source, 1, "g.py", 0, (), fast=False)
                got = build_version(1, new_source, 1, "g.py", 0, (), fast=False, like=old)
                for new in (parsed, got) if got.plain is None else (parsed,):
                    assert resume_path(old, new, path)[:2] == expected, (new_source, path, new is got)
                derived += got.plain is None
                if level >= top:
                    at_change[(len(path) - 1 - level) // 2] += 1  # how many levels above the crash
                else:
                    kept += 1
    assert derived > least[0] and kept > least[1], (derived, kept)
    assert all(at_change[levels] > least[2] for levels in range(4)), at_change


@pytest.mark.parametrize("seeds, least", [
    pytest.param(range(40), 90, id="sample"),
    pytest.param(range(150), 200, id="all", marks=pytest.mark.e2e),
])
def test_a_tree_spliced_from_the_old_one_is_the_tree_parsing_gives_and_leaves_the_old_one_alone(
    seeds: range, least: int,
) -> None:
    """Differential: for one-line surgeries of generated functions, the new tree built by splicing
    the changed statements into the old tree (`daifu.core.splice`) must equal, positions and
    stamped paths included, the tree parsing the new source gives; the old tree must not change."""
    rng = random.Random(3)
    spliced = 0
    for seed in seeds:
        source = ProgramGenerator(seed).source()
        old = build_version(0, source, 1, "g.py", 0, (), fast=False)
        before = ast.dump(old.fdef, include_attributes=True), _stamped(old.fdef)
        for new_source in _edits(source, rng)[::3]:  # the edits that replace a line
            found = splice(old.fdef, old.lines, new_source.split("\n"), 1)
            if found is None:
                continue
            spliced += 1
            try:
                parsed = normalize(parse_function(new_source, 1))
            except SyntaxError:
                raise AssertionError(f"spliced a source that does not parse:\n{new_source}") from None
            annotate(parsed)
            number_finals([s for _l, p, _f in _stamped(parsed) for s in [node_at(parsed, p)]])
            assert ast.dump(found[0], include_attributes=True) == ast.dump(parsed, include_attributes=True), new_source
            assert _stamped(found[0]) == _stamped(parsed)
        assert (ast.dump(old.fdef, include_attributes=True), _stamped(old.fdef)) == before
    assert spliced > least, spliced


def _spliced(old: str, new: str) -> tuple[ast.FunctionDef, Change] | None:
    """What `splice` makes of a function `old` (from line 1) changed into `new`."""
    return splice(build_version(0, old, 1, "t.py", 0, (), fast=False).fdef, old.split("\n"), new.split("\n"), 1)


def test_a_splice_ending_a_block_ends_the_statements_around_it_where_it_ends() -> None:
    old = "def f(xs):\n    for x in xs:\n        try:\n            g(x)\n        finally:\n            h(x)\n"
    new = old.replace("h(x)", "h(x, retries=3)")
    found = _spliced(old, new)
    assert found is not None
    loop = found[0].body[0]
    assert (loop.end_lineno, loop.end_col_offset) == (6, len("            h(x, retries=3)"))
    assert (found[0].end_lineno, found[0].end_col_offset) == (6, len("            h(x, retries=3)"))


@pytest.mark.parametrize("new_line", [
    "            x = (1,",  # opens what the next lines do not close
    "            a = 1; b = 2",  # two statements for one
    "            if x: pass",  # a compound statement
    "        \tg(y)",  # a tab where the function indents with spaces
])
def test_a_change_that_is_not_line_for_line_is_parsed_whole(new_line: str) -> None:
    old = "def f(xs):\n    for x in xs:\n        y = x\n        g(y)\n    return xs\n"
    new = old.replace("        g(y)", new_line[4:])
    assert _spliced(old, new) is None


def test_statements_spliced_together_each_have_their_place() -> None:
    old = "def f(xs):\n    for x in xs:\n        y = x\n        g(y)\n    return xs\n"
    new = old.replace("        y = x\n        g(y)\n", "        y = x + 1\n        g(y, 2)\n")
    found = _spliced(old, new)
    assert found is not None
    assert [path_of(s) for s in found[0].body[0].body] == [(0, "body", 0), (0, "body", 1)]
    assert [ast.unparse(s) for s in found[1].new] == ["y = x + 1", "g(y, 2)"]


def test_a_surgery_of_a_derived_version_compiles_neither() -> None:
    old = "def f(xs):\n    total = 0\n    for x in xs:\n        total += math.floor(x)\n    return total\n"
    first = build_version(0, old, 1, "t.py", 0, (), fast=False)
    second_source = old.replace("math.floor(x)", "math.ceil(x)")
    second = build_version(1, second_source, 1, "t.py", 0, (), fast=False, like=first)
    third_source = second_source.replace("        total += math.ceil(x)\n", "        total += math.ceil(x)\n        total -= shift\n")
    third = build_version(2, third_source, 1, "t.py", 0, (), fast=False, like=second)
    assert third.module_reads() == {"math", "shift"}
    assert (second.plain, third.plain) == (None, None)
    assert third.module_reads() == build_version(2, third_source, 1, "t.py", 0, (), fast=False).module_reads()
