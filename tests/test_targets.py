"""Vaccinating functions by name (`daifu.targets`): resolution, methods kept what they were, overrides
in subclasses, `configure(vaccinate=...)`, `DAIFU_VACCINATE`, `daifu run --vaccinate`, and a step that
passes over its batch (`Vaccine.ends_step`) — on small modules written here, no framework needed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import daifu
from daifu import config, frameworks, targets

LIBRARY = '''
import contextlib


class Loop:
    """A framework's loop in small: it calls `training_step` per batch and sums what it returns."""

    def __init__(self, module):
        self.module = module
        self.seen = []

    def fit(self, batches):
        for index, batch in enumerate(batches):
            out = self.module.training_step(batch, index)
            self.seen.append(out)
        return self.seen


class Module:
    def training_step(self, batch, index):
        raise NotImplementedError

    @staticmethod
    def scale(value):
        return value * 2

    @classmethod
    def make(cls, value):
        return [cls.__name__, value]

    @property
    def size(self):
        return len(self.__class__.__name__)


def helper(value):
    return value + 1


def guarded(value):
    with contextlib.nullcontext():
        result = value / 0
    return result
'''


@pytest.fixture
def library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A fresh module `fwlib_<n>` on `sys.path`, as an installed package would be."""
    name = f"fwlib_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(LIBRARY)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__(name)
    yield module
    sys.modules.pop(name, None)


def vaccinated(function: Any) -> bool:
    return getattr(function, "__daifu__", None) is not None


def test_a_module_function_is_vaccinated_in_place(library: Any) -> None:
    helper = library.helper
    done = targets.vaccinate_target(targets.parse(f"{library.__name__}:helper"))
    assert done == [f"{library.__name__}:helper"]
    assert library.helper is helper and vaccinated(helper)
    assert helper(1) == 2


def test_methods_stay_what_they_were(library: Any) -> None:
    for name in ("Module.scale", "Module.make", "Module.size"):
        targets.vaccinate_target(targets.parse(f"{library.__name__}:{name}"))
    raw = library.Module.__dict__
    assert isinstance(raw["scale"], staticmethod) and isinstance(raw["make"], classmethod)
    assert isinstance(raw["size"], property)
    assert vaccinated(raw["scale"].__func__) and vaccinated(raw["make"].__func__) and vaccinated(raw["size"].fget)
    assert library.Module.scale(3) == 6 and library.Module().scale(3) == 6
    assert library.Module.make(1) == ["Module", 1]
    assert library.Module().size == 6


def test_a_method_covers_overrides_present_and_future(library: Any) -> None:
    class Before(library.Module):
        def training_step(self, batch: int, index: int) -> int:
            return batch

    targets.vaccinate_target(targets.parse(f"{library.__name__}:Module.training_step"))

    class After(library.Module):
        def training_step(self, batch: int, index: int) -> int:
            return batch * 10

    class Deeper(After):
        def training_step(self, batch: int, index: int) -> int:
            return batch * 100

    assert vaccinated(Before.training_step) and vaccinated(After.training_step) and vaccinated(Deeper.training_step)
    assert library.Loop(Deeper()).fit([1, 2]) == [100, 200]


def test_the_subclass_hook_keeps_the_owners_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "hooked_lib.py").write_text(textwrap.dedent('''
        class Base:
            made = []

            def __init_subclass__(cls, tag=None, **kwargs):
                super().__init_subclass__(**kwargs)
                Base.made.append((cls.__name__, tag))

            def step(self):
                return 0
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    name = "hooked_lib"
    hooked_lib = __import__(name)
    targets.vaccinate_target(targets.parse("hooked_lib:Base.step"))

    class Child(hooked_lib.Base, tag="t"):
        def step(self) -> int:
            return 1

    assert hooked_lib.Base.made == [("Child", "t")] and vaccinated(Child.step)
    sys.modules.pop(name)


def test_a_name_that_does_not_resolve_names_what_is_near(library: Any) -> None:
    with pytest.raises(targets.TargetError, match=r"has no 'trainng_step' \(near it: training_step"):
        targets.vaccinate_target(targets.parse(f"{library.__name__}:Module.trainng_step"))
    with pytest.raises(targets.TargetError, match="does not import"):
        targets.vaccinate_target(targets.parse("no_such_module_here:f"))
    with pytest.raises(targets.TargetError, match="not a function"):
        targets.vaccinate_target(targets.parse(f"{library.__name__}:contextlib"))
    with pytest.raises(targets.TargetError, match="is not MODULE:QUALNAME"):
        targets.parse("a b:c")


def test_configure_vaccinates_at_once_and_the_variable_is_checked(library: Any,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    daifu.configure(vaccinate=[f"{library.__name__}:helper"])
    assert vaccinated(library.helper)
    monkeypatch.setenv("DAIFU_VACCINATE", "a.b:C.d, e:f")
    config.configure(vaccinate=None)
    assert config.settings().vaccinate == ("a.b:C.d", "e:f")
    monkeypatch.setenv("DAIFU_VACCINATE", "a b:c")
    with pytest.raises(config.ConfigError, match="DAIFU_VACCINATE"):
        config.settings()
    monkeypatch.delenv("DAIFU_VACCINATE")


def test_a_skipped_step_returns_what_the_framework_takes(library: Any, decide: Any) -> None:
    """SkipIteration in a step with no loop of its own ends the step with `ends_step`'s value: the
    framework's loop goes on with its next batch, having seen the skipped one as passed over."""

    class Step(library.Module):
        def training_step(self, batch: int, index: int) -> int:
            doubled = batch * 2
            checked = 10 // (batch - 3)
            return doubled + checked

    targets.vaccinate_target(targets.Target(library.__name__, "Module.training_step"), lambda _locals: None)
    crashes = decide(daifu.SkipIteration())
    assert library.Loop(Step()).fit([1, 3, 5]) == [2 + 10 // -2, None, 10 + 10 // 2]
    assert [crash.locals["batch"] for crash in crashes] == [3]


def test_a_skip_in_a_step_without_ends_step_is_still_refused(library: Any, decide: Any) -> None:
    targets.vaccinate_target(targets.parse(f"{library.__name__}:guarded"), lambda _locals: 0)
    decide(daifu.SkipIteration())
    with pytest.raises(ZeroDivisionError):  # inside a `with`: ending there would leave it open
        library.guarded(1)
    decide(daifu.SkipIteration())
    targets.vaccinate_target(targets.parse(f"{library.__name__}:helper"))
    assert library.helper(1) == 2


def test_a_profile_names_the_version_when_a_name_moved(monkeypatch: pytest.MonkeyPatch) -> None:
    moved = frameworks.Profile("pt", ("pytest",), (0, 99), (({"pytest": "_pytest.python"}, "Function.nowhere", None),))
    monkeypatch.setitem(frameworks.PROFILES, "pt", moved)
    with pytest.raises(targets.TargetError, match=r"--framework pt: pytest [0-9.]+ does not have "
                                                  r"_pytest.python:Function.nowhere .*may have moved"):
        frameworks.apply("pt")
    absent = frameworks.Profile("gone", ("no-such-distribution-x",), (1, 1), ())
    monkeypatch.setitem(frameworks.PROFILES, "gone", absent)
    with pytest.raises(targets.TargetError, match=r"not installed \(pip install 'daifu\[frameworks\]'\)"):
        frameworks.apply("gone")


def test_the_accelerate_profile_finds_the_training_function() -> None:
    import ast

    tree = ast.parse(textwrap.dedent('''
        def setup(): pass
        def train(accelerator, loss):
            for _ in range(2):
                accelerator.backward(loss)
        class Runner:
            def run(self, loss):
                loss.backward()
    '''))
    assert frameworks.script_functions("accelerate", tree) == ["train", "Runner.run"]
    assert frameworks.script_functions("hf", tree) == []


def test_daifu_run_vaccinates_a_package_and_the_script(library: Any, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f'''
        import daifu
        import {library.__name__} as lib


        class Step(lib.Module):
            def training_step(self, batch, index):
                return 10 // (batch - 3)


        def _policy(crash):
            return daifu.Action("batch = 4") if crash.qualname == "Step.training_step" else None


        daifu.set_policy(_policy)
        print(lib.Loop(Step()).fit([1, 3, 5]), getattr(lib.helper, "__daifu__", None) is not None)
    '''))
    env = {**__import__("os").environ, "PYTHONPATH": f"{tmp_path}:{Path(daifu.__file__).parent.parent}",
           "DAIFU_VACCINATE": f"{library.__name__}:helper"}
    run = subprocess.run([sys.executable, "-m", "daifu", "run", "--vaccinate",
                          f"{library.__name__}:Module.training_step", str(script)],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["[-5,", "10,", "5]", "True"]
    assert "vaccinated" in run.stderr and "Step.training_step, which overrides Module's" in run.stderr
    wrong = subprocess.run([sys.executable, "-m", "daifu", "run", "--vaccinate", f"{library.__name__}:Nope.f",
                            str(script)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert wrong.returncode == 2 and "has no 'Nope'" in wrong.stderr and wrong.stdout == ""


def test_a_skipped_step_is_counted_as_work_passed_over(library: Any, decide: Any) -> None:
    """Automatic repairs are held to what they pass over: a step ended counts as a batch passed over."""
    from daifu.core.account import account_of

    class Step(library.Module):
        def training_step(self, batch: int, index: int) -> int:
            return 10 // (batch - 3)

    targets.vaccinate_target(targets.Target(library.__name__, "Module.training_step"), lambda _locals: None)
    crashes = decide(daifu.SkipIteration())
    library.Loop(Step()).fit([3])
    account = account_of(crashes[0].site, "")
    assert (account.firings, account.steps, account.unknown) == (1, 1, 1)  # its batch's size is not known
