"""The function a person names at the console's `patch`: found from the faulty frame, named for `Patch`.

`patch model.forward` looks `model` up as the frame sees it (its locals, then its module's globals,
then the builtins), then each attribute in turn, as pdb's `p model.forward` would; nothing is
called. The function found is named `module:qualname`, the target `daifu.core.patch` resolves (a
method is patched on its class, so every instance follows), and its source is what the person edits.
"""

from __future__ import annotations

import builtins
import inspect
import textwrap
from collections.abc import Mapping
from types import FrameType, FunctionType, MethodType
from typing import Any

from daifu.core.patch import PatchRefused, resolve


def find(name: str, locals_: Mapping[str, Any], frame: FrameType | None) -> tuple[FunctionType, str]:
    """The function `name` (`model.forward`, or `module:qualname`) means in the faulty frame, and its
    target for `Patch`; `PatchRefused` says why there is none."""
    if ":" in name:
        return resolve(name), name
    first, *attributes = name.split(".")
    scopes = [locals_, frame.f_globals if frame is not None else {}, vars(builtins)]
    scope = next((s for s in scopes if first in s), None)
    if scope is None:
        raise PatchRefused(f"`{first}` is not defined here")
    value = scope[first]
    for position, attribute in enumerate(attributes):
        try:
            value = getattr(value, attribute)
        except Exception as error:  # an attribute that raises is one a person mistyped or cannot patch
            raise PatchRefused(f"`{'.'.join([first, *attributes[:position + 1]])}` cannot be read: "
                               f"{type(error).__name__}: {error}") from None
    if isinstance(value, (MethodType, staticmethod, classmethod)):
        value = value.__func__
    value = inspect.unwrap(value) if callable(value) else value
    if not isinstance(value, FunctionType):
        raise PatchRefused(f"`{name}` is not a Python function (it is {type(value).__name__})")
    target = f"{value.__module__}:{value.__qualname__}"
    try:
        found = resolve(target)
    except PatchRefused as refused:
        raise PatchRefused(f"`{name}` ({value.__qualname__}) cannot be patched: {refused}") from None
    if found is not value:
        raise PatchRefused(f"`{name}` is not the function {target} names (it was replaced since it was defined)")
    return value, target


def source(function: FunctionType) -> str:
    """`function`'s source as a whole `def` at the margin, as `Patch` takes it."""
    try:
        return textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError) as error:
        raise PatchRefused(f"the source of {function.__qualname__} is not available: {error}") from None
