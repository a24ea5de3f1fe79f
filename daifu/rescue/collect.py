"""What a rescue saves: the trained state a frame holds, the RNG states, and where the loop was.

`collect` reads, without changing anything:

- every object of an allowlisted kind (`KINDS`: modules, optimizers, LR schedulers, grad scalers,
  generators) reachable from the frame's locals, from the module globals its code reads, and from its
  callers' locals (`daifu.core.health.reachable`: a local, an item of a container it holds, an
  attribute of an object it holds), each by the state its class saves and loads itself
  (`state_dict()` / `get_state()`), named by where it was found (`model`, `trainer.optimizer`,
  `main:scheduler` for a caller's);
- the RNG states: Python's `random`, NumPy's legacy global generator, torch's CPU generator and the
  CUDA generators, each when the program loaded that library (so it could have drawn from it);
- the loop position: the frame's locals and its callers' that are plain numbers (epoch, step, batch
  index, counters), the loop's own first: the names the function's `for` statements bind and those it
  counts with `+=` (`loop_names`).

A device in `unusable` (`daifu.rescue.devices`) is never touched: an object whose state lives there
is listed as not saved, with the reason, instead. Reading an object's state runs its class's code
(a `state_dict` hook); one that fails is listed as not saved, and the others are kept.
"""

from __future__ import annotations

import ast
import os
import sys
import sysconfig
import textwrap
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import FrameType, ModuleType
from typing import Any

from daifu.core.health import reachable

KINDS: tuple[tuple[str, str], ...] = (
    ("module", "torch.nn.Module"),
    ("optimizer", "torch.optim.Optimizer"),
    ("scheduler", "torch.optim.lr_scheduler.LRScheduler"),
    ("scheduler", "torch.optim.lr_scheduler.ReduceLROnPlateau"),
    ("grad scaler", "torch.amp.GradScaler"),
    ("grad scaler", "torch.cuda.amp.GradScaler"),
    ("generator", "torch.Generator"),
)
"""The classes whose state a rescue saves, by the kind it names them: an allowlist of classes that save
and load their own state, looked up in the torch the program loaded (a class its version lacks is skipped)."""

_DAIFU = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIBRARIES = tuple({sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")})


@dataclass(frozen=True)
class Caller:
    """A frame of the program's own code that called the crashed one (directly or not)."""

    function: str
    file: str
    line: int
    locals: Mapping[str, Any]


@dataclass
class Collected:
    """What `collect` found: `state` is what is written (`torch.save`), the rest describes it."""

    state: dict[str, Any] = field(default_factory=dict)
    objects: list[dict[str, Any]] = field(default_factory=list)
    rng: list[str] = field(default_factory=list)
    position: dict[str, Any] = field(default_factory=dict)
    loop: list[str] = field(default_factory=list)
    callers: list[dict[str, Any]] = field(default_factory=list)
    unsaved: list[dict[str, str]] = field(default_factory=list)

    def not_saved(self, what: str, why: str) -> None:
        self.unsaved.append({"what": what, "why": why})


def callers_of(frame: FrameType | None) -> list[Caller]:
    """The frames of the program's own code above `frame`, innermost first: not DaiFu's, not a library's."""
    found = []
    current = frame.f_back if frame is not None else None
    while current is not None:
        code = current.f_code
        if _programs(code.co_filename):
            function = getattr(code, "co_qualname", code.co_name)  # 3.11: the qualified name
            found.append(Caller(function, code.co_filename, current.f_lineno, dict(current.f_locals)))
        current = current.f_back
    return found


def _programs(filename: str) -> bool:
    if filename.startswith("<"):
        return False
    path = os.path.abspath(filename)
    return not path.startswith(_DAIFU + os.sep) and not path.startswith(_LIBRARIES)


def globals_read(frame: FrameType, namespace: Mapping[str, Any]) -> dict[str, Any]:
    """The module globals `frame`'s code names that its locals do not shadow (modules, classes and
    functions left out: they hold no trained state of their own)."""
    module = frame.f_globals
    return {
        name: module[name]
        for name in frame.f_code.co_names
        if name in module and name not in namespace and not _definition(module[name])
    }


def _definition(value: Any) -> bool:
    return isinstance(value, (ModuleType, type)) or callable(value) and hasattr(value, "__code__")


def loop_names(source: str) -> list[str]:
    """The names a function's loops advance, in the order they appear: the targets of its `for`
    statements and the names it adds to (`step += 1`); none when the source does not parse."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return []
    named = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.AugAssign)):
            named += [(n.lineno, n.col_offset, n.id) for n in ast.walk(node.target) if isinstance(n, ast.Name)]
    return list(dict.fromkeys(name for _, _, name in sorted(named)))


def collect(namespace: Mapping[str, Any], module_globals: Mapping[str, Any], callers: Iterable[Caller],
            unusable: Mapping[str, str], loop: Iterable[str] = ()) -> Collected:
    """The rescue of a frame whose locals are `namespace`; `unusable`: device types not to touch, and why;
    `loop`: the names its loops advance, put first in the position."""
    callers = list(callers)
    found = Collected()
    torch = sys.modules.get("torch")
    if torch is not None:
        kinds = _kinds(torch)
        objects: dict[str, Any] = {}
        for where, value in _candidates(namespace, module_globals, callers):
            kind = _kind_of(kinds, value)
            if kind is not None:
                _add(found, objects, where, kind, value, unusable)
        found.state["objects"] = objects
    found.state["rng"] = _rng(found, torch, unusable)
    numbers = _numbers(namespace)
    found.loop = [name for name in loop if name in numbers]
    found.position = {**{name: numbers[name] for name in found.loop}, **numbers}
    found.callers = [{"function": c.function, "file": c.file, "line": c.line, "position": _numbers(c.locals)}
                     for c in callers]
    found.state["position"] = found.position
    return found


def _candidates(namespace: Mapping[str, Any], module_globals: Mapping[str, Any],
                callers: list[Caller]) -> Iterator[tuple[str, Any]]:
    """Every (where, value) reachable, the frame first, each object once, under the first name found: its
    own name, or, for a caller's that is not the module's top level (or one whose name is taken), that
    name after the caller's (`main:model`)."""
    seen: set[int] = set()
    names: set[str] = set()
    places = [("", namespace), ("", module_globals)]
    places += [(f"{c.function}:" if c.function != "<module>" else "", c.locals) for c in callers]
    for prefix, values in places:
        for where, value in reachable(values):
            if id(value) in seen:
                continue
            seen.add(id(value))
            name = prefix + where if prefix or where not in names else f"<module>:{where}"
            names.add(name)
            yield name, value


def _kinds(torch: Any) -> list[tuple[str, type]]:
    found = []
    for kind, dotted in KINDS:
        value: Any = torch
        for part in dotted.split(".")[1:]:
            value = getattr(value, part, None)
        if isinstance(value, type):
            found.append((kind, value))
    return found


def _kind_of(kinds: list[tuple[str, type]], value: Any) -> str | None:
    cls = type(value)
    return next((kind for kind, base in kinds if issubclass(cls, base)), None)


def _add(found: Collected, objects: dict[str, Any], where: str, kind: str, value: Any,
         unusable: Mapping[str, str]) -> None:
    cls = type(value)
    described = {"name": where, "kind": kind, "class": f"{cls.__module__}.{cls.__qualname__}"}
    try:
        devices = sorted(_devices(kind, value))
        blocked = [device for device in devices if device in unusable]
        if blocked:
            found.not_saved(f"{kind} `{where}`", f"its state is on {blocked[0]}: {unusable[blocked[0]]}")
            return
        objects[where] = value.get_state() if kind == "generator" else value.state_dict()
    except Exception as error:  # the class's own code: a failing hook loses this object, not the rescue
        found.not_saved(f"{kind} `{where}`", f"reading its state raised {type(error).__name__}: {error}")
        return
    found.objects.append({**described, "devices": devices})


def _devices(kind: str, value: Any) -> set[str]:
    """The device types that hold `value`'s state (read from tensors' metadata, never their data)."""
    if kind == "module":
        return {t.device.type for t in (*value.parameters(), *value.buffers())}
    if kind == "optimizer":
        tensors = [p for group in value.param_groups for p in group["params"]]
        tensors += [v for state in value.state.values() for v in state.values() if hasattr(v, "device")]
        return {t.device.type for t in tensors}
    if kind == "generator":
        return {value.device.type}
    if kind == "grad scaler":
        scale = getattr(value, "_scale", None)
        return {scale.device.type} if scale is not None else set()
    return set()


def _rng(found: Collected, torch: Any, unusable: Mapping[str, str]) -> dict[str, Any]:
    """The global random generators' states, of the libraries the program loaded."""
    states: dict[str, Any] = {}
    random = sys.modules.get("random")
    if random is not None:
        states["python"] = random.getstate()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        name, keys, position, has_gauss, gauss = numpy.random.get_state()
        states["numpy"] = (name, keys.tolist(), int(position), int(has_gauss), float(gauss))
    if torch is not None:
        states["torch"] = torch.get_rng_state()
        if torch.cuda.is_initialized():
            if "cuda" in unusable:
                found.not_saved("the CUDA random generators", unusable["cuda"])
            else:
                states["cuda"] = torch.cuda.get_rng_state_all()
    found.rng = sorted(states)
    return states


def _numbers(namespace: Mapping[str, Any]) -> dict[str, Any]:
    """The locals that are plain numbers: the loop's position (epoch, step, batch index, counters)."""
    return {name: value for name, value in namespace.items()
            if type(value) in (int, float, bool) and not name.startswith("@")}
