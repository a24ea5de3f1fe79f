"""A call the crashed statement made may be made again by a repair, with the same arguments, and only then.

The crash is real: a state dict saved from an `nn.DataParallel` wrapper (keys `module.weight`...) loaded
into the bare layer, which raises in `load_state_dict` after `torch.load` read the file. The fix renames the
keys of what the same `torch.load` returned; the allowlist refuses `torch.load` in new code otherwise.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

torch = pytest.importorskip("torch")
nn = torch.nn

from daifu.core.crash import Crash
from daifu.decide.allowlist import check_surgery_safety, context_for
from daifu.decide.made_calls import made_calls
from tests.test_allowlist import live_crash

CRASHED = "teacher.load_state_dict(torch.load(teacher_path, weights_only=True))"
RENAMED = '{k.removeprefix("module."): v for k, v in torch.load(teacher_path, weights_only=True).items()}'
SHARED_PATH = ""
"""A module global the second program reads its file through: a function of the program could rebind it."""


def load_teacher(teacher_path: Path, other_path: Path) -> nn.Module:
    teacher = nn.Linear(3, 2)
    teacher.load_state_dict(torch.load(teacher_path, weights_only=True))
    return teacher


def load_shared(teacher_path: Path, other_path: Path) -> nn.Module:
    teacher = nn.Linear(3, 2)
    teacher.load_state_dict(torch.load(SHARED_PATH, weights_only=True))
    return teacher


def load_after_matmul(teacher_path: Path, other_path: Path) -> nn.Module:
    teacher = nn.Linear(3, 2)
    state = (torch.ones(2) @ torch.ones(3), torch.load(teacher_path, weights_only=True))
    return teacher


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("teacher")
    wrapped = nn.DataParallel(nn.Linear(3, 2))
    torch.save(wrapped.state_dict(), folder / "teacher.pt")
    torch.save(nn.Linear(3, 2).state_dict(), folder / "other.pt")
    return folder / "teacher.pt", folder / "other.pt"


@pytest.fixture(scope="module")
def crash(paths: tuple[Path, Path]) -> Crash:
    crash = live_crash(load_teacher, *paths)
    assert 'Unexpected key(s) in state_dict: "module.weight"' in str(crash.exception)
    return crash


def _fixed(crash: Crash, new: str) -> str:
    assert CRASHED in crash.source
    return crash.source.replace(CRASHED, new)


def test_the_crashed_statement_made_its_loads_call(crash: Crash) -> None:
    made = made_calls(crash)
    expected = ast.parse("torch.load(teacher_path, weights_only=True)", mode="eval").body
    assert ast.dump(expected) in made


def test_the_same_call_is_admitted_in_the_repair_of_the_statement(crash: Crash) -> None:
    fixed = _fixed(crash, f"teacher.load_state_dict({RENAMED})")
    assert check_surgery_safety(fixed, context_for(crash)).ok


def test_the_same_call_on_its_own_line_is_admitted(crash: Crash) -> None:
    fixed = _fixed(crash, "state = torch.load(teacher_path, weights_only=True)\n"
                          '    teacher.load_state_dict({k.removeprefix("module."): v for k, v in state.items()})')
    assert check_surgery_safety(fixed, context_for(crash)).ok


@pytest.mark.parametrize("other", [
    "torch.load(teacher_path)",  # the loader's other arguments: unpickling arbitrary objects
    "torch.load(teacher_path, weights_only=False)",
    "torch.load(other_path, weights_only=True)",  # another file
    "torch.load('/etc/hosts', weights_only=True)",
    "torch.load(teacher_path, weights_only=True, mmap=True)",
])
def test_the_call_with_other_arguments_is_refused(crash: Crash, other: str) -> None:
    fixed = _fixed(crash, f"teacher.load_state_dict({RENAMED.replace('torch.load(teacher_path, weights_only=True)', other)})")
    checked = check_surgery_safety(fixed, context_for(crash))
    assert not checked.ok and "torch.load" in " ".join(checked.reasons)


def test_a_new_call_is_refused(crash: Crash) -> None:
    fixed = _fixed(crash, f"teacher.load_state_dict({RENAMED})\n    torch.save(teacher.state_dict(), teacher_path)")
    assert not check_surgery_safety(fixed, context_for(crash)).ok


def test_the_call_is_refused_when_the_repair_rebinds_its_argument(crash: Crash) -> None:
    fixed = _fixed(crash, f"teacher_path = other_path\n    teacher.load_state_dict({RENAMED})")
    checked = check_surgery_safety(fixed, context_for(crash))
    assert not checked.ok and "torch.load" in " ".join(checked.reasons)


def test_the_call_is_refused_when_the_repair_rebinds_the_module(crash: Crash) -> None:
    fixed = _fixed(crash, f"import numpy as torch\n    teacher.load_state_dict({RENAMED})")
    assert not check_surgery_safety(fixed, context_for(crash)).ok


def test_a_call_read_through_a_global_name_is_not_made_again(paths: tuple[Path, Path]) -> None:
    global SHARED_PATH
    SHARED_PATH = str(paths[0])
    crash = live_crash(load_shared, *paths)
    assert not any("attr='load'" in call for call in made_calls(crash))
    fixed = crash.source.replace("torch.load(SHARED_PATH, weights_only=True)",
                                 RENAMED.replace("teacher_path", "SHARED_PATH"))
    assert not check_surgery_safety(fixed, context_for(crash)).ok


def test_a_call_the_statement_did_not_reach_is_not_made_again(paths: tuple[Path, Path]) -> None:
    crash = live_crash(load_after_matmul, *paths)
    assert "inconsistent tensor size" in str(crash.exception)
    assert not any("attr='load'" in call for call in made_calls(crash))
    fixed = crash.source.replace("torch.ones(2) @ torch.ones(3)", "torch.ones(3) @ torch.ones(3)")
    checked = check_surgery_safety(fixed, context_for(crash))
    assert not checked.ok and "torch.load" in " ".join(checked.reasons)
