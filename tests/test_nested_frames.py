"""A crash inside a comprehension, generator expression or lambda is repaired in the function whose
`def` holds it. Up to Python 3.11 a comprehension runs in a frame of its own (`<listcomp>`), whose
source `inspect` gives as its function's; since 3.12 it is inlined. Either way the report's site
(`repairbot.rules.context.ReportView.site`) is the function: a surgery of the vaccinated function,
a patch of a callee's method, never a patch of `<listcomp>`."""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

import daifu
from daifu.report.build import build_report
from repairbot.generate.view import sites
from repairbot.llm_check import read_reply
from repairbot.protocol import CrashReport
from repairbot.rules.context import ReportView

ROWS = '''\
class CsvRows:
    def __init__(self, rows):
        self.rows = rows

    def __getitem__(self, index):
        row = self.rows[index]
        return [float(cell) for cell in row.split(",")]
'''


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str, str], ModuleType]:
    """Load a module from a file (DaiFu reads sources from files), under its name in `sys.modules`."""

    def load(name: str, source: str) -> ModuleType:
        path = tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        loaded = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, name, loaded)
        spec.loader.exec_module(loaded)
        return loaded

    return load


def as_a_3_11_client_sends_it(report: CrashReport) -> CrashReport:
    """`report` with the method's comprehension in a frame of its own, carrying the method's source,
    as DaiFu on Python 3.10 and 3.11 sent it before (on 3.12 there is no such frame)."""
    frames = [f for f in report.frames if f.function != "<listcomp>"]
    method = frames[-1]
    listcomp = method.model_copy(update={"function": "<listcomp>", "locals": {},
                                         "qualname": f"{method.qualname}.<locals>.<listcomp>"})
    return report.model_copy(update={"frames": [*frames, listcomp]})


def test_a_fix_of_the_method_holding_a_comprehension_that_crashed_is_a_patch_of_the_method(module: Any) -> None:
    rows = module("csvrows", ROWS)
    program = module("loadrows", """
        import daifu

        @daifu.transform
        def load(data):
            first = data[0]
            second = data[1]
            return first + second
    """)
    line = ROWS.splitlines().index('        return [float(cell) for cell in row.split(",")]') + 1
    reply = json.dumps({"diagnosis": {"category": "exceptional_data", "explanation": "A cell is not a number."},
                        "suggestions": [{"kind": "edit", "function": "CsvRows.__getitem__", "start_line": line,
                                         "end_line": line, "confidence": 0.8, "explanation": "Skip bad cells.",
                                         "code": '        return [float(c) for c in row.split(",") '
                                                 'if c.replace(".", "").isdigit()]'}]})
    seen: dict[str, Any] = {}

    def policy(crash: daifu.Crash) -> daifu.Patch:
        try:
            return decide(crash)
        except Exception as error:
            seen["error"] = error
            raise

    def decide(crash: daifu.Crash) -> daifu.Patch:
        report = build_report(crash)
        nested = [f for f in report.frames if f.function == "<listcomp>"]
        assert all(f.source is None for f in nested)  # a comprehension's frame carries no source of its own
        for shown in (report, as_a_3_11_client_sends_it(report)):
            context = ReportView(shown)
            assert (context.site.qualname, context.at_function) == ("CsvRows.__getitem__", False)
            assert context.callee_target() == "sys.modules['csvrows'].CsvRows.__getitem__"
            assert [s.target for s in sites(shown)] == [None, "sys.modules['csvrows'].CsvRows.__getitem__"]
            reading = read_reply(shown, reply)
            assert reading.dropped == 0, reading.notes
            seen[shown.frames[-1].function] = reading.suggestions
        suggestion = seen["<listcomp>"][0]
        assert (suggestion.kind, suggestion.target) == ("patch_function", "sys.modules['csvrows'].CsvRows.__getitem__")
        assert suggestion.target is not None and suggestion.code is not None
        return daifu.Patch(suggestion.target, suggestion.code)

    daifu.set_policy(policy)
    try:
        assert program.load(rows.CsvRows(["1,2", "3,x"])) == [1.0, 2.0, 3.0]
    finally:
        if "error" in seen:
            raise seen["error"]
    assert rows.CsvRows(["4,y"])[0] == [4.0]  # the method is patched for every caller


def test_a_comprehension_of_the_vaccinated_function_is_repaired_by_a_surgery_of_it(module: Any) -> None:
    program = module("parse", """
        import daifu

        @daifu.transform
        def parse(lines):
            out = []
            for line in lines:
                out.append([int(cell) for cell in line.split(",")])
            return out
    """)
    contexts: list[ReportView] = []

    def policy(crash: daifu.Crash) -> daifu.Decision:
        report = build_report(crash)
        contexts.append(ReportView(report))
        return daifu.Surgery(crash.source.replace("int(cell)", "int(cell) if cell.isdigit() else 0"))

    daifu.set_policy(policy)
    assert program.parse(["1,2", "3,x"]) == [[1, 2], [3, 0]]
    assert [(c.at_function, c.site.qualname or c.site.function) for c in contexts] == [(True, "parse")]


def test_a_special_method_can_be_patched_but_not_reached_through_special_names(module: Any) -> None:
    from daifu.core.patch import PatchRefused, resolve

    rows = module("specialrows", ROWS)
    assert resolve("specialrows:CsvRows.__getitem__") is rows.CsvRows.__getitem__
    for target in ("specialrows:CsvRows.__init__.__globals__", "specialrows:CsvRows.__class__.mro",
                   "specialrows:CsvRows.__dict__", "specialrows:__builtins__.print"):
        with pytest.raises(PatchRefused):
            resolve(target)
