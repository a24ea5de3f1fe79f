"""The allowlist's context is total: no value a program holds makes judging a repair raise.

`daifu.decide.allowlist_context` reads the crashed frame (its locals, its globals, the callables its
source calls) to tell what a repair may call. Whatever those values are — C extension functions,
Cython functions whose class has a `__code__` descriptor, bound methods of modules, partials, classes
with odd `__code__`, `__getattr__`, `__module__` or `__class__` — building the context, and checking a
repair that names each of them, must answer, never raise, and never run the program's code.
"""

from __future__ import annotations

import builtins
import functools
import itertools
import math
import operator
import types
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.extras import BOT

for _package in (*BOT, "numpy"):
    pytest.importorskip(_package)

import numpy as np

import daifu
from daifu.decide.allowlist import build_context, check_safety, check_surgery_safety

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

RAN: list[str] = []
"""What the odd objects below record when their own code runs: building a context must not run it."""


class CodeProperty:
    """A callable whose `__code__` is a property that raises."""

    @property
    def __code__(self) -> Any:
        RAN.append("CodeProperty.__code__")
        raise RuntimeError("no code here")

    def __call__(self) -> None:
        pass


class CodeNotCode:
    """A callable whose `__code__` is a string, not a code object."""

    __code__ = "not a code object"

    def __call__(self) -> None:
        pass


class GetattrRaises:
    """A callable answering every missing attribute with an error."""

    def __getattr__(self, name: str) -> Any:
        RAN.append(f"GetattrRaises.{name}")
        raise RuntimeError(f"no {name}")

    def __call__(self) -> None:
        pass


class ClassProperty:
    """A callable whose `__class__` lies, and raises when asked."""

    @property  # type: ignore[misc]
    def __class__(self) -> Any:  # noqa: PLE0241
        RAN.append("ClassProperty.__class__")
        raise RuntimeError("no class")

    def __call__(self) -> None:
        pass


class LoudMeta(type):
    """A metaclass whose classes answer `__module__`, `__code__` and every other name with an error."""

    def __getattribute__(cls, name: str) -> Any:
        if name in ("__module__", "__code__", "__wrapped__", "__dict__", "__name__"):
            RAN.append(f"LoudMeta.{name}")
            raise RuntimeError(f"no {name}")
        return super().__getattribute__(name)

    def __instancecheck__(cls, instance: Any) -> bool:
        RAN.append("LoudMeta.__instancecheck__")
        raise RuntimeError("no isinstance")

    def __subclasscheck__(cls, subclass: Any) -> bool:
        RAN.append("LoudMeta.__subclasscheck__")
        raise RuntimeError("no issubclass")


class Loud(metaclass=LoudMeta):
    def __call__(self) -> None:
        pass


class ModuleNameNotStr:
    """A class whose `__module__` is not a string."""

    __module__ = 42  # type: ignore[assignment]

    def __call__(self) -> None:
        pass


def wrapped_in_a_cycle() -> None:
    pass


wrapped_in_a_cycle.__wrapped__ = wrapped_in_a_cycle  # type: ignore[attr-defined]


class LoudModule(types.ModuleType):
    """A module whose attributes raise (lazy-loading modules do stranger things)."""

    def __getattribute__(self, name: str) -> Any:
        if name not in ("__class__",):
            RAN.append(f"LoudModule.{name}")
            raise RuntimeError(f"no {name}")
        return super().__getattribute__(name)


def odd_values() -> dict[str, Any]:
    """Values a program may hold that once made the context raise, or could."""
    tensor = torch.zeros(2)
    return {
        "code_property": CodeProperty(),
        "code_not_code": CodeNotCode(),
        "getattr_raises": GetattrRaises(),
        "class_property": ClassProperty(),
        "loud_class": Loud,
        "loud_instance": Loud(),
        "module_name_not_str": ModuleNameNotStr(),
        "module_name_not_str_class": ModuleNameNotStr,
        "wrapped_in_a_cycle": wrapped_in_a_cycle,
        "loud_module": LoudModule("loud"),
        "cython_function": np.random.default_rng,
        "generator_method": np.random.default_rng(0).standard_normal,
        "ufunc": np.add,
        "bound_tensor_method": tensor.add,
        "unbound_tensor_method": torch.Tensor.add,
        "tensor_property_getter": torch.Tensor.grad,
        "array_method": np.zeros(2).sum,
        "partial_of_a_partial": functools.partial(functools.partial(print, 1), 2),
        "partial_of_a_module_function": functools.partial(operator.add, 1),
        "lru_cached": functools.lru_cache(maxsize=None)(len),
        "itemgetter": operator.itemgetter(1),
        "methodcaller": operator.methodcaller("strip"),
        "count": itertools.count(),
        "module_method": math.floor,
        "builtin_method_of_a_str": "x".join,
        "classmethod_of_a_builtin": dict.fromkeys,
        "slot_wrapper": object.__init__,
        "method_wrapper": object().__str__,
        "staticmethod_object": staticmethod(len),
        "classmethod_object": classmethod(len),
        "module_instance": nn.Linear(1, 1),
        "module_forward": nn.Linear(1, 1).forward,
        "optimizer_step": torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=0.1).step,
        "path_method": Path("/tmp").exists,
    }


def library_values() -> Iterator[tuple[str, Any]]:
    """Every public value of the libraries a training program uses, and of a few C types' attributes."""
    for module in (torch, torch.nn, F, torch.linalg, np, np.random, functools, builtins, operator, itertools, math):
        for name, value in sorted(vars(module).items()):
            if not name.startswith("__"):
                yield f"{module.__name__}.{name}", value
    for kind in (torch.Tensor, np.ndarray, nn.Module, torch.optim.SGD, dict, str, types.FunctionType):
        for name in dir(kind):
            try:
                yield f"{kind.__name__}.{name}", getattr(kind, name)
            except Exception:  # noqa: BLE001 - an attribute the type cannot even give: not a value anyone holds
                continue


def calling_each(names: list[str]) -> str:
    """A function's source that calls every name, so that each is judged as a callee of the function too."""
    return "def f():\n" + "".join(f"    {name}()\n" for name in names) + "    return 0\n"


def chunks(items: list[tuple[str, Any]], size: int) -> Iterator[list[tuple[str, Any]]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def test_odd_values_neither_raise_nor_run_their_code() -> None:
    values = odd_values()
    RAN.clear()
    context = build_context(calling_each(sorted(values)), values, __name__)
    for name in values:
        check_safety(f"{name}()\nkeep = {name}\nkeep = [{name}]", context)
        check_safety(f"y = {name}.attribute\nz = max([1], key={name})", context)
    assert RAN == []


@pytest.mark.parametrize("every", [pytest.param(5, id="sample"), pytest.param(1, id="all", marks=pytest.mark.e2e)])
def test_every_public_value_of_torch_numpy_and_the_standard_library_is_judged_without_raising(every: int) -> None:
    """Every `every`-th value (a fifth of each library's, in the default run; all of them under e2e)."""
    items = [(f"v{i}", value) for i, (_, value) in enumerate(library_values())]
    assert len(items) > 3000
    for part in chunks(items[::every], 400):
        values = dict(part)
        context = build_context(calling_each([name for name, _ in part]), values, __name__)
        for name, _ in part[:40]:
            check_safety(f"{name}()\nkeep = {name}", context)


def test_callables_reached_through_attributes_of_modules_are_judged_without_raising() -> None:
    names = [f"{alias}.{name}" for alias, module in (("torch", torch), ("np", np), ("F", F), ("math", math))
             for name in sorted(vars(module)) if not name.startswith("_")]
    values = {"torch": torch, "np": np, "F": F, "math": math}
    context = build_context(calling_each(names), values, __name__)
    assert "np.median" in context.callables  # a pure function of numpy the function calls


def dtype_program(epochs):
    rng = np.random.default_rng(0)
    features = torch.from_numpy(rng.standard_normal((64, 8)))
    labels = torch.from_numpy(rng.integers(0, 3, 64))
    model = nn.Linear(8, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _epoch in range(epochs):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(features), labels)
        loss.backward()
        optimizer.step()
    return loss.item()


def test_the_issue_program_float64_into_float32_is_repaired_in_automatic_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 25.2: a Cython function in the function's source (`np.random.default_rng`) made the
    context raise; the bot's answer was never considered and the run died."""
    from tests.copies import fresh

    daifu.configure(mode="automatic", approve="auto", workspace=tmp_path / "ws")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        loss = daifu.transform(fresh(dtype_program))(3)
    assert math.isfinite(loss)
    assert "raised" not in capsys.readouterr().err


def test_a_surgery_of_the_issue_program_is_checked_in_its_real_context() -> None:
    from daifu.decide.allowlist import context_for
    from tests.test_allowlist import live_crash

    crash = live_crash(dtype_program, 2)
    assert "mat1 and mat2 must have the same dtype" in str(crash.exception)
    context = context_for(crash)
    fixed = crash.source.replace("model(features)", "model(features.float())")
    assert check_surgery_safety(fixed, context).ok


def test_building_a_context_imports_nothing_into_the_program(tmp_path: Path) -> None:
    """Looking at numpy's and torch's namespaces must not load their lazy submodules (`numpy.testing`,
    `torch._dynamo`): a module imported by DaiFu's judgement would change the program it judges."""
    import subprocess
    import sys

    script = (
        "import sys, numpy, torch\n"
        "from daifu.decide.allowlist import build_context\n"
        "from daifu.decide.allowlist_system import system_attributes\n"
        "system_attributes()\n"
        "before = set(sys.modules)\n"
        "build_context('def f():\\n    return numpy.median(torch.zeros(1).numpy())\\n', "
        "{'numpy': numpy, 'torch': torch}, '__main__')\n"
        "print(sorted(set(sys.modules) - before))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_a_callable_handed_on_is_judged_as_a_call_but_a_librarys_class_is_a_type() -> None:
    import collections
    import os
    import shutil

    values = {"OrderedDict": collections.OrderedDict, "remove": os.remove, "rmtree": shutil.rmtree, "h": {},
              "xs": [1], "program_helper": calling_each}
    context = build_context("def f(h):\n    return h\n", values, __name__)
    assert check_safety("ok = isinstance(h, OrderedDict)\nn = sorted(xs, key=program_helper)", context).ok
    for code in ("f = remove", "sorted(xs, key=remove)", "list(map(rmtree, xs))", "d = {'k': rmtree}"):
        verdict = check_safety(code, context)
        assert "a callable handed on is called" in str(verdict) and "reaches the system" in str(verdict), code


def test_pure_objects_follow_the_numeric_modules_imported_and_never_a_rebound_name(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`pure_objects` is read once while the same modules are loaded: a module imported later is read,
    and a name the program rebinds to its own function afterwards does not inherit the old value's place."""
    import statistics
    import sys

    from daifu.decide.allowlist_numeric import pure_objects

    monkeypatch.delitem(sys.modules, "statistics")
    assert id(statistics.median) not in pure_objects()
    monkeypatch.setitem(sys.modules, "statistics", statistics)
    assert pure_objects()[id(statistics.median)] == "statistics.median"

    def median(values: Any) -> Any:  # the program's own: it may do anything
        return values

    monkeypatch.setattr(statistics, "median", median)
    assert id(median) not in pure_objects()


def test_pure_objects_read_module_by_module_equal_the_table_read_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module imported since the table was read is read alone, the others kept: the table is the one a
    whole read makes, each object under the same path."""
    import sys

    from daifu.decide import allowlist_numeric

    fft = pytest.importorskip("numpy.fft")
    monkeypatch.delitem(sys.modules, "numpy.fft")
    without = allowlist_numeric.pure_objects()
    monkeypatch.setitem(sys.modules, "numpy.fft", fft)
    kept = allowlist_numeric.pure_objects()
    monkeypatch.setattr(allowlist_numeric, "_pure_read", {})
    monkeypatch.setattr(allowlist_numeric, "_parts_read", {})

    assert id(fft.fft) not in without and kept[id(fft.fft)] == "numpy.fft.fft"
    assert kept == allowlist_numeric.pure_objects()
