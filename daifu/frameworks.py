"""Profiles: which functions to vaccinate for a training loop that a framework runs (`--framework`).

`hf` (Hugging Face `transformers.Trainer`): `Trainer.training_step` and `Trainer.compute_loss`, with
the user's overrides of them. `lightning`: `LightningModule.training_step`, that is the user's
`training_step` of every `LightningModule` subclass, as it is defined. `accelerate`: Accelerate has no
loop of its own, so the profile names the script's functions that call `.backward(...)` (the user's
training function: `accelerator.backward(loss)`).

A step that passes over its batch (`SkipIteration` at a statement in no loop of the step) returns
what the framework takes for "nothing learned from this batch": `None` from a Lightning
`training_step` (Lightning then runs no backward, and the batch's optimizer step finds no gradient;
its counters, scheduler and callbacks count the batch as any other); from `compute_loss` a zero loss that still depends on the
model's trainable parameters (the Trainer's backward, gradient accumulation, optimizer and scheduler
steps and callbacks go on as for any batch, and the batch adds nothing to the gradients).

Every function a profile names is a step (`vaccinate_target(step=True)`): a fork trial of a repair in it
follows the framework's next calls of it as its horizon (`daifu.core.step_horizon`).

Each profile is checked against the installed version: a name that is not where the profile looks
is an error naming the version found, not a silent run without DaiFu.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from daifu.targets import Target, TargetError, vaccinate_target

EndsStep = Callable[[dict[str, Any]], Any]


def _no_batch(_locals: dict[str, Any]) -> None:
    """Lightning runs no backward for a batch whose `training_step` returns `None`."""
    return None


def _zero_loss(namespace: dict[str, Any]) -> Any:
    """A zero loss that depends on every trainable parameter of the model `compute_loss` was given:
    its backward adds zeros to the gradients, so the Trainer's step goes on as for any batch."""
    import torch

    model = namespace.get("model")
    if not isinstance(model, torch.nn.Module):
        model = getattr(namespace.get("self"), "model", None)
    trainable = [p for p in model.parameters() if p.requires_grad] if isinstance(model, torch.nn.Module) else []
    if not trainable:
        raise ValueError("compute_loss has no model with trainable parameters to make a zero loss from")
    loss = sum((p.sum() * 0.0 for p in trainable), torch.zeros((), device=trainable[0].device))
    return (loss, None) if namespace.get("return_outputs") else loss


@dataclass(frozen=True)
class Profile:
    """A framework: the distributions that provide it (the first installed is used), the major
    versions its names were checked on, and its functions — the module that defines each, by
    distribution, its qualified name there, and what it returns to pass over a batch."""

    name: str
    distributions: tuple[str, ...]
    checked: tuple[int, int]
    targets: tuple[tuple[dict[str, str], str, EndsStep | None], ...]


_TRAINER = {"transformers": "transformers.trainer"}
_MODULE = {"lightning": "lightning.pytorch.core.module", "pytorch_lightning": "pytorch_lightning.core.module"}

PROFILES: dict[str, Profile] = {
    "hf": Profile("hf", ("transformers",), (4, 5), (
        (_TRAINER, "Trainer.training_step", None),
        (_TRAINER, "Trainer.compute_loss", _zero_loss),
    )),
    "lightning": Profile("lightning", ("lightning", "pytorch_lightning"), (2, 2), (
        (_MODULE, "LightningModule.training_step", _no_batch),
    )),
    "accelerate": Profile("accelerate", ("accelerate",), (0, 1), ()),
}  # fmt: skip
"""The profiles, by the name `--framework` takes."""


def apply(name: str) -> list[str]:
    """Vaccinate the library functions of profile `name`; the names vaccinated. `TargetError` when the
    framework is not installed, or a name is not where the profile looks in the installed version."""
    profile = PROFILES[name]
    distribution, version = _installed(profile)
    done: list[str] = []
    for modules, qualname, ends_step in profile.targets:
        target = Target(modules[distribution], qualname)
        try:
            done += vaccinate_target(target, ends_step, step=True)
        except TargetError as error:
            raise TargetError(f"--framework {name}: {distribution} {version} does not have {target} where the "
                              f"profile looks (checked on {_majors(profile)}; it may have moved): {error}") from None
    return done


def script_functions(name: str, tree: ast.Module) -> list[str]:
    """The script's functions the profile vaccinates (`accelerate`: those that call `.backward(...)`,
    top-level functions and methods of top-level classes)."""
    if name != "accelerate":
        return []
    found = []
    for node in tree.body:
        scope = [(node, node.name)] if isinstance(node, ast.FunctionDef) else []
        if isinstance(node, ast.ClassDef):
            scope = [(n, f"{node.name}.{n.name}") for n in node.body if isinstance(n, ast.FunctionDef)]
        found += [qualname for function, qualname in scope if _calls_backward(function)]
    return found


def _calls_backward(function: ast.FunctionDef) -> bool:
    return any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "backward"
        for node in ast.walk(function)
    )


def _installed(profile: Profile) -> tuple[str, str]:
    for distribution in profile.distributions:
        try:
            version = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
        major = int(version.split(".")[0]) if version.split(".")[0].isdigit() else -1
        if not profile.checked[0] <= major <= profile.checked[1]:
            from daifu.say import say

            say(f"{distribution} {version} is not a version the {profile.name} profile was checked on "
                f"({_majors(profile)}); its names are looked for all the same")
        return distribution, version
    raise TargetError(f"--framework {profile.name}: {' or '.join(profile.distributions)} is not installed "
                      "(pip install 'daifu[frameworks]')")


def _majors(profile: Profile) -> str:
    low, high = profile.checked
    return f"{low}.x" if low == high else f"{low}.x to {high}.x"
