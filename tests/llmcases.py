"""The crashes of `tests/llmcrashes.py` as reports, and a check that a suggested repair really fixes one.

A `Case` runs its program until it crashes, builds the report the runtime would send, and can
tell whether a suggestion fixes the crash by doing what the runtime does with it: a surgery is
compiled in the program's module and called again with the same arguments; a patch of a callee
is swapped into the live function (through `daifu.core.patch.patch_function`); an action runs in the
crashed frame's namespace and the faulty statement runs after it.
"""

from __future__ import annotations

import builtins
import inspect
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tests.llmcrashes as programs
from daifu.core.patch import patch_function, resolve
from daifu.core.crash import Crash
from repairbot.protocol import CrashReport
from daifu.report.build import build_report, function_info
from daifu.decide.allowlist import check_safety, context_for
from daifu.decide.suggestions import CheckResult, check_action, check_surgery
from repairbot.protocol import Suggestion
from tests.botfixtures import crash_from


@dataclass
class Case:
    """A program that crashes, the arguments that make it crash, and its report."""

    name: str
    function: Callable[..., Any]
    make_args: Callable[[], tuple[Any, ...]]
    crash: Crash = field(init=False)
    report: CrashReport = field(init=False)

    def __post_init__(self) -> None:
        self.crash = crash_from(self.function, *self.make_args())
        self.report = build_report(self.crash)

    def line_of(self, text: str, source: str | None = None, first: int | None = None) -> int:
        """The file line of the first line holding `text` in the function (or in `source`)."""
        source = source if source is not None else self.report.function.source
        first = first if first is not None else self.report.function.first_lineno
        return first + next(i for i, line in enumerate(source.splitlines()) if text in line)

    def accepted(self, suggestion: Suggestion) -> CheckResult:
        """The client's own checks of a suggestion (`daifu.suggestions`), with the names the frame can see."""
        names = set(self.crash.locals) | set(self.function.__globals__) | set(dir(builtins))
        if suggestion.kind == "surgery":
            return check_surgery(suggestion.code, function_info(self.crash), names=names)
        if suggestion.kind == "patch_function":
            return check_action(suggestion.code) if resolve(suggestion.target or "") else CheckResult(("no target",))
        if suggestion.kind == "action":
            verdict = check_action(suggestion.code)
            return verdict if not verdict.ok else check_safety(suggestion.code, context_for(self.crash))
        return CheckResult()

    def fixes(self, suggestion: Suggestion) -> bool:
        """Whether applying `suggestion` as the runtime would lets the crashed work complete."""
        try:
            if suggestion.kind == "surgery":
                namespace = dict(self.function.__globals__)
                exec(compile(textwrap.dedent(suggestion.code), self.report.function.filename, "exec"), namespace)
                namespace[self.function.__name__](*self.make_args())
            elif suggestion.kind == "patch_function":
                return self._patched(suggestion)
            elif suggestion.kind == "action":
                frame = dict(self.crash.locals)
                scope = dict(self.function.__globals__)
                exec(suggestion.code, scope, frame)
                exec(textwrap.dedent(self.crash.statement), scope, frame)
            else:
                return False
        except Exception:
            return False
        return True

    def _patched(self, suggestion: Suggestion) -> bool:
        """Swap the callee's code in place (as the client's action does), rerun, restore."""
        target = resolve(suggestion.target or "")
        saved = target.__code__
        try:
            patch_function(target, suggestion.code)
            self.function(*self.make_args())
        except Exception:
            return False
        finally:
            target.__code__ = saved
        return True


def _images_args() -> tuple[Any, ...]:
    model = programs.make_mlp()
    return model, programs.make_images(), torch_sgd(model), 2, []


def torch_sgd(model: Any) -> Any:
    import torch

    return torch.optim.SGD(model.parameters(), lr=0.1)


def _evaluator_args() -> tuple[Any, ...]:
    return programs.Evaluator(programs.make_mlp()), programs.make_images()


def _fit_args() -> tuple[Any, ...]:
    model = programs.make_mlp()
    return model, programs.make_images(), torch_sgd(model), []


_SCRATCH = tempfile.TemporaryDirectory(prefix="daifu-llm-")
"""Removed when the process ends."""


def _save_args() -> tuple[Any, ...]:
    """A folder that does not exist yet, a new one each time: a repair run before must not have made it."""
    return programs.make_mlp(), str(Path(tempfile.mkdtemp(dir=_SCRATCH.name)) / "checkpoints"), 2


def cases() -> dict[str, Case]:
    """The four example crashes, by name: `train`, `method`, `deep`, `save`."""
    return {
        "train": Case("train", programs.train, _images_args),
        "method": Case("method", inspect.unwrap(programs.Evaluator.evaluate), _evaluator_args),
        "deep": Case("deep", programs.fit, _fit_args),
        "save": Case("save", programs.save_checkpoints, _save_args),
    }
