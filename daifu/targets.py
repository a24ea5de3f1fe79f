"""Vaccinating functions by name, `MODULE:QUALNAME`, without editing the code that defines them.

For a training loop that lives in a framework (`trainer.train()`, `trainer.fit(model)`) the functions
worth vaccinating are a library's (`transformers.trainer:Trainer.training_step`) or a class the user
derives from one (a `LightningModule`'s `training_step`). Naming them is enough: `daifu run
--vaccinate`, `daifu.configure(vaccinate=[...])`, `DAIFU_VACCINATE`.

A function is vaccinated in place, as `@daifu.transform` does (its code object is swapped), so every
reference to it follows and a method stays what it was on its class: a plain method, a
`staticmethod`, a `classmethod`, a property's getter. A method named on a class also covers its
overrides in the class's subclasses, those already defined and those defined later (the class's
`__init_subclass__` is chained to vaccinate them as they are made): the user's
`class LossTrainer(Trainer)` overriding `compute_loss` is vaccinated when `Trainer.compute_loss` is.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FunctionType, ModuleType
from typing import Any

from daifu import config

SCRIPT = "__main__"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class TargetError(LookupError):
    """A name to vaccinate that does not resolve; the message says what exists near it."""


@dataclass(frozen=True)
class Target:
    """A function to vaccinate: `module` (`__main__` for the script) and its `qualname` there."""

    module: str
    qualname: str

    def __str__(self) -> str:
        return f"{self.module}:{self.qualname}"


def parse(text: str) -> Target:
    """`MODULE:QUALNAME`, or a bare `QUALNAME`, which names a function of the script (`__main__`)."""
    module, _, qualname = text.strip().rpartition(":")
    module = module or SCRIPT
    if not _NAME.match(module) or not _NAME.match(qualname):
        raise TargetError(f"{text!r} is not MODULE:QUALNAME (e.g. transformers.trainer:Trainer.training_step)")
    return Target(module, qualname)


def configure(**changes: Any) -> config.Settings:
    """`daifu.configure`: `daifu.config.configure`, and the functions named by `vaccinate=[...]`
    vaccinated at once (they must be defined by then: a function of the script, after its `def`)."""
    effective = config.configure(**changes)
    if changes.get("vaccinate"):
        vaccinate_all([parse(text) for text in effective.vaccinate])
    return effective


def vaccinate_all(targets: Sequence[Target]) -> list[str]:
    """Vaccinate each target (`vaccinate_target`); the names vaccinated, said on stderr."""
    from daifu.say import say

    done: list[str] = []
    for target in targets:
        done += vaccinate_target(target)
    if done:
        say(f"vaccinated {', '.join(done)}")
    return done


def vaccinate_target(target: Target, ends_step: Callable[[dict[str, Any]], Any] | None = None,
                     step: bool = False) -> list[str]:
    """Vaccinate the function `target` names, and for a method its overrides in subclasses (now and
    later); the names vaccinated. `TargetError` when the name does not resolve. `ends_step`, when
    given, is what the vaccinated function returns for a `SkipIteration` taken outside any loop of
    it (`daifu.core.resume.Vaccine.ends_step`): a framework's step that passes over its batch.
    `step`: the function is a step a framework's loop calls (`Vaccine.step`): a trial of a repair in
    it follows the framework's next calls of it (`daifu.core.step_horizon`)."""
    owner, name, found = resolve(target)
    done = [str(target)] if _vaccinate(found, ends_step, step) else []
    if isinstance(owner, type):
        _watch_subclasses(owner, name, ends_step, step)
        for subclass in _subclasses(owner):
            if name in subclass.__dict__ and _vaccinate(subclass.__dict__[name], ends_step, step):
                done.append(f"{subclass.__module__}:{subclass.__qualname__}.{name}")
    return done


def resolve(target: Target) -> tuple[Any, str, Any]:
    """The owner (module or class), the last name, and the object as stored on its owner (a
    `staticmethod` stays one); a method a class inherits resolves to the class that defines it."""
    try:
        owner: Any = sys.modules[SCRIPT] if target.module == SCRIPT else importlib.import_module(target.module)
    except ImportError as error:
        raise TargetError(f"cannot vaccinate {target}: module {target.module!r} does not import ({error})") from None
    *path, name = target.qualname.split(".")
    for part in path:
        owner = _member(owner, part, target)
    if isinstance(owner, type):
        owner = next((klass for klass in owner.__mro__ if name in klass.__dict__), owner)
    found = _member(owner, name, target)
    if not _is_function(found):
        raise TargetError(f"cannot vaccinate {target}: it is a {type(found).__name__}, not a function or method")
    return owner, name, found


def _member(owner: Any, name: str, target: Target) -> Any:
    import difflib
    import inspect

    try:
        return inspect.getattr_static(owner, name)
    except AttributeError:
        pass
    names = [n for n in dir(owner) if not n.startswith("__")]
    near = difflib.get_close_matches(name, names, n=5, cutoff=0.5) or sorted(names)[:12]
    what = owner.__name__ if isinstance(owner, (type, ModuleType)) else repr(owner)
    raise TargetError(f"cannot vaccinate {target}: {what} has no {name!r} (near it: {', '.join(near) or 'nothing'})")


def _is_function(value: Any) -> bool:
    import inspect

    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    elif isinstance(value, property):
        value = value.fget
    try:
        return isinstance(inspect.unwrap(value), FunctionType)
    except ValueError:
        return False


def _vaccinate(found: Any, ends_step: Callable[[dict[str, Any]], Any] | None, step: bool = False) -> bool:
    """Vaccinate `found` in place; whether it is vaccinated now (it may run unvaccinated: its
    source unreadable, or DaiFu off, said by `daifu.transform` itself)."""
    from daifu.vaccinate import transform

    transform(found)
    function = _function(found)
    vaccine = getattr(function, "__daifu__", None)
    if vaccine is None:
        return False
    if ends_step is not None:
        vaccine.ends_step = ends_step
    vaccine.step = vaccine.step or step
    return True


def _function(found: Any) -> Any:
    import inspect

    if isinstance(found, (staticmethod, classmethod)):
        found = found.__func__
    elif isinstance(found, property):
        found = found.fget
    return inspect.unwrap(found)


def _subclasses(owner: type) -> list[type]:
    found: list[type] = []
    work: list[type] = list(type.__subclasses__(owner))
    while work:
        klass = work.pop()
        if klass not in found:
            found.append(klass)
            work += type.__subclasses__(klass)
    return found


EndsStep = Callable[[dict[str, Any]], Any] | None

_watched: dict[type, dict[str, tuple[EndsStep, bool]]] = {}
"""The classes whose subclasses are watched, and for each the method names vaccinated in them (with
what `_vaccinate` takes beside the method)."""


def _watch_subclasses(owner: type, name: str, ends_step: EndsStep, step: bool) -> None:
    """Vaccinate `name` in each subclass of `owner` that defines it, as the subclass is made: the
    owner's `__init_subclass__` is replaced by one that calls what it had, then vaccinates."""
    names = _watched.get(owner)
    if names is not None:
        names.setdefault(name, (ends_step, step))
        return
    names = _watched[owner] = {name: (ends_step, step)}
    previous = owner.__dict__.get("__init_subclass__")

    def __init_subclass__(cls: type, **kwargs: Any) -> None:
        if previous is not None:
            previous.__get__(None, cls)(**kwargs)
        else:
            super(owner, cls).__init_subclass__(**kwargs)  # type: ignore[arg-type]
        for method, (returns, is_step) in names.items():
            if method in cls.__dict__ and _vaccinate(cls.__dict__[method], returns, is_step):
                from daifu.say import say

                say(f"vaccinated {cls.__module__}:{cls.__qualname__}.{method}, which overrides {owner.__qualname__}'s")

    owner.__init_subclass__ = classmethod(__init_subclass__)  # type: ignore[assignment]
