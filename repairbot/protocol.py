"""The repair bot's wire protocol: every request and response body, in one place.

The crash report itself is `daifu.report.CrashReport`, shared with the client.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from daifu.report import CrashReport

SuggestionKind = Literal["surgery", "action", "patch_function", "retry", "skip"]


class CrashRequest(BaseModel):
    """A crash report, and optionally which backend should answer (the server's default if not).

    deadline_s: how long the client will wait for the answer, in seconds from when it sent the
        request. The service answers within it (with the rules engine's answer when the model is
        too slow); the server's own deadline (`daifu serve --deadline`) is the upper bound.
    """

    report: CrashReport
    backend: str | None = None
    deadline_s: float | None = Field(default=None, gt=0.0, le=3600.0)


class Culprit(BaseModel):
    """The frame whose code is at fault, which is not always where the exception was raised."""

    function: str
    filename: str
    lineno: int
    reason: str


class Diagnosis(BaseModel):
    """The root cause, in a category from the rules engine's list, and the traceback explained."""

    category: str
    culprit: Culprit
    explanation: str


class Suggestion(BaseModel):
    """One proposed repair, in the terms of `daifu.decisions`.

    surgery: `code` is the whole new `def` of the vaccinated function.
    action: `code` runs in the faulty frame (its locals and globals), then the statement reruns.
    patch_function: `code` is the whole new `def` of a callee, reached from the faulty frame by
        the expression `target`; the client turns it into an action that swaps the code in place.
    retry / skip: no code.
    origin: who proposed it: `model` (a language model, through the service's checks) or `rules`
        (the embedded rules engine); `None` from servers that predate the field.
    """

    kind: SuggestionKind
    code: str = ""
    explanation: str
    confidence: float = Field(ge=0.0, le=1.0)
    target: str | None = None
    origin: Literal["model", "rules"] | None = None


class DiagnoseResponse(BaseModel):
    """A diagnosis, and who gave it.

    fallback_reason: why the rules engine stood in for the backend asked, wholly or in part (its
        suggestions are added when the model gave none that could be used).
    notes: what the service did with the model's reply: each suggestion it dropped and why, each
        repair it made to the model's code (a decorator restored, a diff applied), in the user's
        file and line numbers.
    """

    fingerprint: str
    diagnosis: Diagnosis
    backend_used: str
    fallback_reason: str | None = None
    cached: bool = False
    notes: list[str] = Field(default_factory=list)


class SuggestResponse(DiagnoseResponse):
    """A diagnosis and the suggestions, best first."""

    suggestions: list[Suggestion]


class BackendInfo(BaseModel):
    """A backend the server can use, and whether it is configured to work now."""

    name: str
    available: bool
    detail: str


class BackendsResponse(BaseModel):
    default: str
    backends: list[BackendInfo]


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    backend: str
