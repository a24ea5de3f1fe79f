"""The horizon of a fork trial in a framework's step: the framework's next calls of the step function.

A step that a framework calls (a `LightningModule`'s `training_step`, a `Trainer`'s `compute_loss` or
`training_step`) has no loop of its own: the loop is the framework's. A trial that stopped when the
repaired call returns would check the crashed step only, and a repair that spoils the next step would
pass. So, in a trial's forked copy, when the crashed call is over, its return value goes back up to
the framework (`StepReturned`, turned by `Vaccine.crash` into the hand-over that returns it), and the
copy runs the framework's loop on: each later call of the same function is an iteration of the
horizon (`daifu.core.trial.iteration_started`), which lasts until the next call (what the framework
does with the value, its backward and optimizer step, is part of it), and its facts read the losses
in the call's locals when it returns and the loss it returns (`returned_losses`). The horizon is bounded as
any other (`trial_iterations`, `trial_seconds`); when the framework's call that the program made
returns (or raises) into the program's own frame that made it (`anchor`), or that frame itself returns
(a loop of the program's own code that calls the step), the loop is over.

Only the copy follows calls (a profile function, `sys.setprofile`, set in the copy alone): the live
run's path, crash or not, is unchanged. An in-process trial cannot follow them — the framework's loop
is the live run's own, and what it did could not be put back — so its horizon stays the crashed call.
"""

from __future__ import annotations

import dis
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

_RETURNS = frozenset(dis.opmap[name] for name in ("RETURN_VALUE", "RETURN_CONST") if name in dis.opmap)


class StepReturned(BaseException):
    """The crashed call is over in a trial's copy: carries its return value up to the `Vaccine.crash`
    of the crashed frame, which hands it back to the framework. A `BaseException`, so that the layers
    that decided (a policy's `except Exception`) let it through."""

    def __init__(self, value: Any) -> None:
        super().__init__("the crashed step returned in a trial's copy")
        self.value = value

    def resume(self, _namespace: dict[str, Any]) -> Any:
        """The continuation of the hand-over: the crashed call returns its value."""
        return self.value


@dataclass(frozen=True)
class Calls:
    """A framework step's calls, as a trial follows them: `is_step(code)`, whether a frame running
    `code` is a call of the step function (its fast path, a stub of a surgery's version); `anchor`,
    the program's own frame whose call into the framework is its loop."""

    is_step: Callable[[CodeType], bool]
    anchor: FrameType


def anchor(crashed: FrameType | None, is_step: Callable[[CodeType], bool],
           own_code: Callable[[str], bool]) -> FrameType | None:
    """The nearest frame outside the crashed one that is the program's own code (not the libraries',
    not DaiFu's, not a call of the step): where the program called the framework; `None` when there is
    none."""
    frame = crashed.f_back if crashed is not None else None
    while frame is not None:
        if own_code(frame.f_code.co_filename) and not is_step(frame.f_code):
            return frame
        frame = frame.f_back
    return None


def returned_losses(value: Any) -> dict[str, float]:
    """The loss a step returns, as `{"returned loss": value}`: a float or one-element floating tensor,
    the first item of a tuple (`(loss, outputs)`), or the `"loss"` item of a mapping; `{}` otherwise."""
    if isinstance(value, tuple) and value:
        value = value[0]
    elif isinstance(value, dict):
        value = value.get("loss")
    torch = sys.modules.get("torch")
    if isinstance(value, float):
        return {"returned loss": value}
    if torch is not None and isinstance(value, torch.Tensor) and value.numel() == 1 and value.is_floating_point():
        try:
            return {"returned loss": float(value.detach().reshape(()).item())}
        except RuntimeError:
            return {}
    return {}


class Follower:
    """The profile function of a trial's copy that follows the step's calls: `started(frame)` at each
    new call (not a nested one: a surgery's stub calls the fast path), `over(frame, losses)` when it
    returns, `ended(raised)` when the framework's call returns into the anchor, or the anchor itself
    returns (the program's own loop that calls the step) (`raised`: by an exception)."""

    def __init__(self, calls: Calls, started: Callable[[FrameType], None],
                 over: Callable[[FrameType, dict[str, float]], None], ended: Callable[[bool], None]) -> None:
        self.calls = calls
        self.started, self.over, self.ended = started, over, ended
        self.open: FrameType | None = None
        self.losses: dict[str, float] = {}

    def install(self) -> None:
        sys.setprofile(self)

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            if self.open is None and self.calls.is_step(frame.f_code):
                self.open, self.losses = frame, {}
                self.started(frame)
        elif event == "return":
            if frame is self.open:  # a surgery's stub returns what the fast path it called returned
                self.losses.update(returned_losses(arg))
                self.open = None
                self.over(frame, self.losses)
            elif self.calls.is_step(frame.f_code):
                if self.open is not None:  # the fast path a surgery's stub called
                    self.losses.update(returned_losses(arg))
            elif frame is self.calls.anchor or frame.f_back is self.calls.anchor:
                self.ended(not _returning(frame))


def _returning(frame: FrameType) -> bool:
    """Whether `frame` leaves by a `return` (else an exception unwinds it): its last instruction."""
    code = frame.f_code.co_code
    return 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] in _RETURNS
