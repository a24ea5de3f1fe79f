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

    deadline_s: how many seconds the client waits for the answer; the service bounds its own work
        by it (and by its own budget), and answers 503 rather than work on for a client long gone.
    """

    report: CrashReport
    backend: str | None = None
    deadline_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)


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
    """

    kind: SuggestionKind
    code: str = ""
    explanation: str
    confidence: float = Field(ge=0.0, le=1.0)
    target: str | None = None


class DiagnoseResponse(BaseModel):
    """A diagnosis, and who gave it: `fallback_reason` says why the rules engine stood in."""

    fingerprint: str
    diagnosis: Diagnosis
    backend_used: str
    fallback_reason: str | None = None
    cached: bool = False


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
    """Whether the service answers, and whether its default backend can work now.

    `degraded`: the service is up but its default backend is not available (say, the openai backend
    without a key); answers then come from the rules engine, with `fallback_reason` saying so.
    """

    status: Literal["ok", "degraded"]
    backend: str
    available: bool
    detail: str


class ErrorResponse(BaseModel):
    """The body of a 400, 401, 413 or 503 answer: what was wrong, in a sentence."""

    detail: str


class FieldProblem(BaseModel):
    """One wrong field of a request: where (`loc`, from `body`), and what is wrong with it."""

    loc: list[str | int]
    msg: str
    type: str


class ValidationErrorResponse(BaseModel):
    """The body of a 422 answer: each wrong field, and all of them in one sentence."""

    detail: list[FieldProblem]
    message: str
