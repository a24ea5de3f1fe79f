"""The allowlist for unattended repairs: every hostile payload refused, every ordinary fix admitted.

Payloads and fixes are checked in the live context of a real crash (`training_step` of
`tests.hostile_payloads`, crashed on float labels), as an action, inside a surgery and inside a
`patch_function`, as automatic mode checks them.
"""

from __future__ import annotations

import builtins
import dataclasses
import inspect
import json
import os
import pickle
import shutil
import socket
import subprocess
import sys
import traceback
from pathlib import Path
from collections.abc import Callable
from typing import Any

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

from daifu.decide.allowlist import (
    CALLS,
    CONTAINER_METHODS,
    METHODS,
    Context,
    build_context,
    check_patch_safety,
    check_safety,
    check_suggestion,
    check_surgery_safety,
    context_for,
)
from daifu.decide.allowlist_system import system_attributes
from daifu.decide.candidates import candidates
from daifu.config import settings
from daifu.decide.verify import Verification
from daifu.core.crash import Crash
from daifu.report.build import build_report
from repairbot.rules import analyse
from tests import hostile_payloads
from tests.copies import fresh
from tests.botfixtures import crash_from
from tests.hostile_payloads import (
    AIMING,
    HEADERS_OVER_EFFECTS,
    LEGITIMATE,
    LEGITIMATE_SURGERIES,
    PAYLOADS,
    Payload,
    embedded_in_surgery,
    rendered,
)

torch = pytest.importorskip("torch")
nn = torch.nn

ROOT = Path(__file__).resolve().parent.parent
PLACES = {"marker": "/tmp/daifu-marker", "victim": "/tmp/daifu-victim", "victim_dir": "/tmp/daifu-dir", "port": 9}


def live_crash(fn: Callable[..., Any], *args: Any) -> Crash:
    """`crash_from`, with the crashed frame kept as the runtime keeps it (its globals are the context)."""
    crash = crash_from(fn, *args)
    frame = next(f for f, _ in traceback.walk_tb(crash.exception.__traceback__) if f.f_code is fn.__code__)
    return dataclasses.replace(crash, frame=frame)


def float_label_batches() -> list[tuple[Any, Any]]:
    x = torch.randn(4, 8)
    return [(x, torch.tensor([0, 1, 2, 1])), (x, torch.tensor([0.0, 1.0, 2.0, 1.0]))]


@pytest.fixture(scope="module")
def crash() -> Crash:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return live_crash(hostile_payloads.training_step, model, optimizer, float_label_batches(), [], "runs/model.pth", 32)


@pytest.fixture(scope="module")
def context(crash: Crash) -> Context:
    return context_for(crash)


def code_of(payload: Payload) -> str:
    return rendered(payload, str(PLACES["marker"]), str(PLACES["victim"]), str(PLACES["victim_dir"]), 9)


def test_the_corpus_covers_every_spelling_the_issue_names() -> None:
    names = {p.name for p in PAYLOADS}
    issue = {
        "sys_modules",
        "vars_of_os",
        "os_dict",
        "alias_of_os",
        "star_import",
        "posix_spawnp",
        "asyncio_subprocess",
        "pickle_loads",
        "torch_load_bytes",
        "code_interpreter",
        "operator_methodcaller",
        "globals_builtins_exec",
        "builtins_eval",
        "vars_type_subclasses",
        "private_socket",
        "xmlrpc_client",
        "asyncio_open_connection_leaks_key",
        "while_true",
    }
    old_denylist = {
        "subprocess_run",
        "os_system",
        "eval",
        "exec",
        "dunder_import",
        "shutil_rmtree",
        "path_unlink",
        "aliased_os_remove",
        "urllib",
        "socket_sends_key",
        "requests",
        "getattr_computed",
        "compile_exec",
        "from_os_import_system",
    }
    assert issue | old_denylist <= names and len(PAYLOADS) >= 100 and len(names) == len(PAYLOADS)


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: p.name)
def test_every_payload_is_refused_as_an_action(payload: Payload, context: Context) -> None:
    verdict = check_safety(code_of(payload), context)
    assert not verdict.ok
    assert all(reason.startswith("line ") and " of the action: " in reason for reason in verdict.reasons), (
        verdict.reasons
    )


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: p.name)
def test_every_payload_is_refused_in_a_module_that_imports_nothing(payload: Payload, crash: Crash) -> None:
    """Where `os` or `torch` is no global, a payload must not pass by binding or reading them itself."""
    bare = build_context(crash.source, dict(crash.locals), "bare_module")
    if payload.needs:
        pytest.skip(f"harmless without a global {payload.needs!r}")
    assert not check_safety(code_of(payload), bare).ok
    surgery = embedded_in_surgery(code_of(payload), crash.source, "loss = F.cross_entropy(out, y)")
    assert not check_surgery_safety(surgery, bare).ok


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: p.name)
def test_every_payload_is_refused_inside_a_surgery(payload: Payload, crash: Crash, context: Context) -> None:
    surgery = embedded_in_surgery(code_of(payload), crash.source, "loss = F.cross_entropy(out, y)")
    verdict = check_surgery_safety(surgery, context)
    assert not verdict.ok
    first_inserted = crash.first_lineno - 1 + crash.source.splitlines().index(  # in file lines, as messages say
        next(line for line in crash.source.splitlines() if "loss = F.cross_entropy" in line)
    )
    lines = {int(reason.split(":")[0].removeprefix("line ")) for reason in verdict.reasons}
    assert all(first_inserted < line <= first_inserted + 1 + code_of(payload).count("\n") for line in lines), (
        verdict.reasons
    )


def head_of(items, count):
    return items[:count]


def take_half(items):
    size = len(items) / 2
    return head_of(items, size)


@pytest.fixture(scope="module")
def callee_crash() -> tuple[Crash, Context, str]:
    crash = live_crash(take_half, [1, 2, 3, 4])
    return crash, context_for(crash), f"sys.modules[{__name__!r}].head_of"


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: p.name)
def test_every_payload_is_refused_inside_a_patch_function(
    payload: Payload, callee_crash: tuple[Crash, Context, str]
) -> None:
    _, context, target = callee_crash
    patch = embedded_in_surgery(code_of(payload), inspect.getsource(head_of), "return items[:count]")
    assert not check_patch_safety(patch, target, context).ok


def test_a_patch_reaches_only_a_user_function_on_the_stack(callee_crash: tuple[Crash, Context, str]) -> None:
    _, context, target = callee_crash
    fixed = inspect.getsource(head_of).replace("items[:count]", "items[:int(count)]")
    assert check_patch_safety(fixed, target, context).ok
    for hostile_target in ("os.system('x') or sys.modules['m'].f", "sys.modules['os'].system", "__import__"):
        verdict = check_patch_safety(fixed, hostile_target, context)
        assert "not a user function on the crash's stack" in str(verdict)


def test_the_payloads_do_harm_when_nothing_checks_them(tmp_path: Path) -> None:
    """Run unchecked in a subprocess, every payload that can create, delete or connect does so."""
    environment = dict(os.environ, PYTHONPATH=str(ROOT), OPENAI_API_KEY="sk-canary-not-a-key-000000000000")
    done = subprocess.run(
        [sys.executable, "-m", "tests.hostile_payloads", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=environment,
    )
    results = json.loads(done.stdout.strip().splitlines()[-1])
    harmless = [name for name, r in results.items()
                if not (r["marker"] or r["victim_gone"] or r["mode_changed"] or r["connections"])]
    assert harmless == [] and len(results) >= 60, (harmless, done.stderr[-2000:])


@pytest.mark.parametrize("code", LEGITIMATE)
def test_ordinary_fixes_are_admitted_as_actions(code: str, context: Context) -> None:
    assert check_safety(code, context).ok, check_safety(code, context).reasons


@pytest.mark.parametrize(("old", "new"), LEGITIMATE_SURGERIES)
def test_ordinary_surgeries_are_admitted(old: str, new: str, crash: Crash, context: Context) -> None:
    source = crash.source.replace(old, new, 1)
    assert source != crash.source
    assert check_surgery_safety(source, context).ok, check_surgery_safety(source, context).reasons


@pytest.mark.parametrize("code", AIMING)
def test_an_action_that_aims_the_programs_own_save_needs_a_person(code: str, crash: Crash, context: Context) -> None:
    save = crash.first_lineno + next(i for i, line in enumerate(crash.source.splitlines()) if "torch.save(" in line)
    verdict = check_safety(code, context)
    assert verdict.reasons == (
        f"line {save}: the program's own `torch.save` reaches files, processes or the network, and the action "
        "changes what aims it (`checkpoint_path`): a repair that aims the program's effects needs a person",
    )


@pytest.mark.parametrize(("old", "new"), HEADERS_OVER_EFFECTS)
def test_a_changed_header_over_the_programs_own_save_needs_a_person(
    old: str, new: str, crash: Crash, context: Context
) -> None:
    save = crash.first_lineno + next(i for i, line in enumerate(crash.source.splitlines()) if "torch.save(" in line)
    verdict = check_surgery_safety(crash.source.replace(old, new, 1), context)
    assert len(verdict.reasons) == 1 and verdict.reasons[0].startswith(
        f"line {save}: the program's own `torch.save` reaches files, processes or the network, and it runs under "
        "the header the change makes at line "
    ), verdict.reasons


def test_the_unchanged_lines_of_a_surgery_are_the_users_own(crash: Crash, context: Context) -> None:
    # `torch.save` is the user's line, unchanged: fine. The same call added by the bot is not.
    assert "torch.save(" in crash.source and check_surgery_safety(crash.source, context).ok
    added = crash.source.replace("optimizer.step()\n", "optimizer.step()\n        torch.save(model, 'x.pt')\n", 1)
    assert "torch.save" in str(check_surgery_safety(added, context))


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        ("batch_size):", "batch_size=print(1)):", "def line"),
        ("def training_step(", "@print\ndef training_step(", "def line"),
        ("def training_step(model", "def training_step(self, model", "def line"),
        ("for step, (x, y) in enumerate(batches):", "while True:", "`while`"),
        ("for step, (x, y) in enumerate(batches):", "for step, (x, y) in enumerate(open('/etc/passwd')):", "open"),
    ],
)
def test_a_surgery_may_not_change_its_def_line_or_headers_unchecked(
    old: str, new: str, why: str, crash: Crash, context: Context
) -> None:
    verdict = check_surgery_safety(crash.source.replace(old, new, 1), context)
    assert why in str(verdict)


def test_a_surgery_must_be_one_function(context: Context, crash: Crash) -> None:
    assert "exactly one function" in str(check_surgery_safety(crash.source + "\nimport os\n", context))


def test_reasons_name_the_construct_and_its_line(context: Context) -> None:
    verdict = check_safety("x = x.float()\nimport socket\ny = y.long()\nos.system('ls')", context)
    assert verdict.reasons == (
        "line 2 of the action: `import socket`: only cmath, difflib, math, numpy, numpy.fft, numpy.linalg, os, "
        "os.path, pathlib, statistics, time, torch, torch.cuda, torch.fft, torch.linalg, torch.nn, "
        "torch.nn.functional, torch.nn.init, torch.special, torch.utils, torch.utils.data may be imported",
        "line 4 of the action: calls `os.system` (os.system), which is not on the allowlist",
    )


@pytest.mark.parametrize(
    ("code", "admitted"),
    [
        ("import time\ntime.sleep(60)", True),
        ("import time\ntime.sleep(0.5)", True),
        ("import time\ntime.sleep(61)", False),
        ("import time\ntime.sleep(-1)", False),
        ("import time\ntime.sleep(batch_size)", False),
        ("sleep(5)", True),  # the module's own `from time import sleep`
        ("sleep(61)", False),
        ("x = torch.zeros(10000, 10000)", True),
        ("x = torch.zeros(100000, 10000)", False),
        ("x = torch.zeros((10**4, 10**5))", False),
        ("x = torch.zeros(size=(10**4, 10**5))", False),
        ("x = [0] * (10**8)", True),
        ("x = [0] * (10**8 + 1)", False),
        ("n = 2**32", True),
        ("n = 2**32 + 1", False),
        ("n = 2**(2**64)", False),
        ("for i in range(10**6):\n    pass", True),
        ("for i in range(10**6 + 1):\n    pass", False),
        ("for i in range(batch_size):\n    pass", True),
        ("ids = torch.randint(0, 10**9, (64, 128))", True),
    ],
)
def test_bounds_on_sleep_sizes_and_loops(code: str, admitted: bool, context: Context) -> None:
    assert check_safety(code, context).ok is admitted, check_safety(code, context).reasons


@pytest.mark.parametrize(
    "code",
    [
        "losses.remove(1.0)",  # a list the frame holds
        "d = {}\nd.update(a=1)\nd.pop('a')",  # a dict the code made
        "name = checkpoint_path.replace('.pth', '.pt')",  # a str the frame holds
    ],
)
def test_mutating_methods_on_names_known_to_hold_containers_or_strings(code: str, context: Context) -> None:
    assert check_safety(code, context).ok, check_safety(code, context).reasons


@pytest.mark.parametrize(
    ("code", "admitted"),
    [
        ("line = 'step {} loss {loss:.4f} {0!r}'.format(batch_size, loss=losses)", True),  # fields name values only
        ("line = '{acc:>8.3f}'.format_map(dict(acc=1.0))", True),
        ("line = '{0.__globals__}'.format(model)", False),  # an attribute read by name
        ("line = '{m[key]}'.format(m=losses)", False),  # an item read by name
        ("line = '{x:{x.__class__}}'.format(x=losses)", False),  # a field nested in a spec
        ("template = '{0}'\nline = template.format(model)", False),  # not a literal: its fields are not known
    ],
)
def test_a_literal_format_whose_fields_only_name_values_is_admitted(code: str, admitted: bool,
                                                                     context: Context) -> None:
    assert check_safety(code, context).ok is admitted, check_safety(code, context).reasons


@pytest.mark.parametrize(
    "code",
    [
        "model.remove(1)",  # a model: not a container
        "(losses or os).remove('x')",  # an expression, not a name
        "losses = os.path\nlosses.remove('x')",  # rebound by the code
        "batch_size.replace('a', 'b')",  # an int the frame holds
    ],
)
def test_mutating_methods_on_anything_else_are_refused(code: str, context: Context) -> None:
    assert not check_safety(code, context).ok


DANGEROUS_MODULES = (os, shutil, subprocess, socket, pickle, builtins, sys, Path)
REVIEWED = {
    "abs",
    "all",
    "any",
    "max",
    "min",
    "sum",
    "round",
    "pow",
    "index",
    "count",
    "get",
    "keys",
    "values",
    "items",
    "split",
    "join",
    "exists",
    "int",
    "float",
    "bool",
    "modules",
    "mkdir",
    "eval",
    "select",
    "type",
    "absolute",
}
"""Names that are also attributes of a dangerous module but harmless there (`builtins.int`; `sys.modules`
is a dict, which a call cannot run; `os.mkdir` makes a folder as `os.makedirs` may; `subprocess.select`
is the `select` module it imported; `Path.absolute` computes a path), allowed with a guard (`eval` only
without arguments), or a tensor's conversion (`x.type(torch.float)`) where the builtin `type` is refused
as a call."""


def test_no_allowed_method_names_an_effect_of_a_dangerous_module(context: Context) -> None:
    anywhere = METHODS | (context.methods - system_attributes())  # what any receiver may be called with
    clashes = {
        f"{getattr(m, '__name__', m)}.{name}"
        for m in DANGEROUS_MODULES
        for name in anywhere
        if hasattr(m, name) and name not in REVIEWED
    }
    assert clashes == set()
    assert anywhere & system_attributes() == {"eval"}  # `model.eval()`, admitted without arguments only
    assert {"remove", "copy", "pop", "clear", "update"} <= CONTAINER_METHODS  # the ones that clash live here
    assert {"to_dense", "detach", "float", "long", "flatten", "clamp", "reshape", "median"} <= anywhere


def test_no_allowed_call_reads_or_writes_files_or_runs_code() -> None:
    forbidden = {
        "torch.load",
        "torch.save",
        "torch.from_file",
        "numpy.load",
        "numpy.save",
        "os.system",
        "os.remove",
        "os.environ",
        "os.getenv",
        "time.sleep",
    }
    assert forbidden & CALLS == {"time.sleep"}  # sleep is there, bounded by its own rule


def test_callables_from_dangerous_modules_are_not_admitted_as_the_functions_own() -> None:
    def runner(path):
        from os import system as run  # noqa: F401 - what a user's code could hold

        fn = print
        fn(path)
        run(path)
        return len(path) / "x"

    crash = live_crash(runner, "p")
    context = context_for(crash)
    assert "fn" in context.callables and "len" in context.callables and "run" not in context.callables
    assert "calls `run`" in str(check_safety("run('touch x')", context))


@pytest.mark.parametrize(
    "code",
    [
        "y = y.long()",
        "import time as _daifu_time\n_daifu_time.sleep(10)\ndel _daifu_time",
    ],
)
def test_check_suggestion_dispatches_by_kind(code: str, context: Context) -> None:
    from repairbot.protocol import Suggestion

    assert check_suggestion(Suggestion(kind="action", code=code, explanation="", confidence=1), context).ok
    assert check_suggestion(Suggestion(kind="retry", explanation="", confidence=1), context).ok
    hostile = Suggestion(kind="action", code="import os\nos.system('x')", explanation="", confidence=1)
    assert not check_suggestion(hostile, context).ok


# -- the rules engine's real suggestions, on the crashes of tests/test_rules.py ------------------------

RULES_CRASHES = [
    "halves",
    "float_size",
    "to_numpy",
    "view_transposed",
    "linear_too_small",
    "image_into_linear",
    "double_input",
    "wrong_device",
    "float_targets",
    "column_targets",
    "mismatched_sum",
    "train_with_nan_guard",
    "busy_device",
    "take_half",
]


def rules_crash(name: str, tmp_path: Path) -> Crash:
    from tests import test_rules

    fn = getattr(test_rules, name)
    arguments: dict[str, tuple[Any, ...]] = {
        "halves": ([1, 2, 3, 4],),
        "take_half": ([1, 2, 3, 4],),
        "train_with_nan_guard": ([torch.ones(2), torch.tensor([float("nan"), 1.0])],),
    }
    return live_crash(fn, *arguments.get(name, ()))


@pytest.mark.parametrize("name", RULES_CRASHES)
def test_every_rules_suggestion_on_the_rules_tests_crashes_is_admitted(name: str, tmp_path: Path) -> None:
    crash = rules_crash(name, tmp_path)
    _, suggestions = analyse(build_report(crash))
    context = context_for(crash)
    found = candidates(Verification(crash, settings()), suggestions)
    assert found, name
    for candidate in found:
        verdict = check_suggestion(candidate.suggestion, context, getattr(candidate.decision, "source", None))
        assert verdict.ok and not candidate.unsafe, (name, candidate.kind, candidate.code, verdict.reasons)


def save_into(folder):
    model = nn.Linear(2, 2)
    target = os.path.join(folder, "run1", "model.pt")
    torch.save(model.state_dict(), target)
    return target


def load_from(folder, name):
    checkpoint_path = Path(folder) / name
    return torch.load(checkpoint_path)


def oom_step(loader):
    model = nn.Linear(3, 1)
    for inputs in loader:
        if inputs.shape[0] > 4:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        out = model(inputs)
    return out


@pytest.mark.parametrize("case", ["missing folder", "near name", "no near name", "out of memory"])
def test_rules_suggestions_for_paths_and_memory_are_admitted_or_aim_the_programs_read(
    case: str, tmp_path: Path
) -> None:
    torch.save({"w": 1}, tmp_path / "model.pt")
    loader = torch.utils.data.DataLoader(torch.randn(16, 3), batch_size=8)
    crash = {
        "missing folder": lambda: live_crash(save_into, str(tmp_path)),
        "near name": lambda: live_crash(load_from, str(tmp_path), "modle.pt"),
        "no near name": lambda: live_crash(load_from, str(tmp_path), "zzz.pt"),
        "out of memory": lambda: live_crash(oom_step, loader),
    }[case]()
    _, suggestions = analyse(build_report(crash))
    context = context_for(crash)
    coded = [s for s in suggestions if s.code]
    assert coded, case
    for suggestion in coded:
        verdict = check_suggestion(suggestion, context)
        if case == "no near name":  # it points the program's own `torch.load` at a file it computes
            assert "the program's own `torch.load`" in str(verdict) and "needs a person" in str(verdict), verdict
        else:
            assert verdict.ok, (case, suggestion.code, verdict.reasons)


def test_a_rules_patch_of_a_callee_is_admitted_unattended(tmp_path: Path) -> None:
    import daifu

    original = head_of.__code__
    daifu.configure(mode="automatic", approve="auto", workspace=tmp_path / "ws")
    try:
        assert daifu.transform(fresh(take_half))([1, 2, 3, 4]) == [1, 2]  # repaired: the patch, or a smaller edit
    finally:
        head_of.__code__ = original
    crash = live_crash(take_half, [1, 2, 3, 4])
    patch = next(s for s in analyse(build_report(crash))[1] if s.kind == "patch_function")
    verdict = check_suggestion(patch, context_for(crash))
    assert verdict.ok, verdict.reasons
