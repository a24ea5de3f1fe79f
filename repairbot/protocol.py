"""The repair bot's wire protocol: every request and response body, its routes and its words, in one place.

The runtime (`daifu`) builds a `CrashReport` from a live crash and sends it; the service answers with a
`SuggestResponse`. A process whose crash waits for a person (`approve="remote"`) posts a
`PendingRepairRequest` and polls for a `RepairChoice`. This module imports nothing but pydantic and the
standard library: both sides import it, and the service never loads the runtime. The kinds of repair
(`SuggestionKind`) and the choices a person has (`Choice`, with their labels) are the runtime's
decisions as the wire names them (`daifu.core.kinds` maps each to its decision).
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field

SUGGEST_ROUTE = "/v1/suggest"
DIAGNOSE_ROUTE = "/v1/diagnose"
PENDING_ROUTE = "/v1/pending"
"""Where a waiting process posts its repair; what follows is under it, its key in `X-DaiFu-Key`:"""
POLL_ROUTE = "/{repair_id}/poll"
PROPOSAL_ROUTE = "/{repair_id}/proposals/{proposal}"
WITHDRAW_ROUTE = "/{repair_id}/withdraw"

CATEGORIES = ("api_misuse", "tensor_mismatch", "out_of_memory", "path", "exceptional_data", "transient", "unknown")
"""The kinds of root cause a diagnosis names (`Diagnosis.category`)."""


class Variable(BaseModel):
    """One live value, summarized (see `daifu.report.summary`)."""

    type: str
    text: str
    facts: dict[str, Any] = Field(default_factory=dict)


class ChainedException(BaseModel):
    """An exception in the chain: `cause` came from `raise ... from`, `context` from an except block."""

    relation: Literal["cause", "context"]
    type: str
    message: str


class ExceptionInfo(BaseModel):
    """The exception that reached the vaccinated statement, with the exceptions chained to it."""

    type: str
    module: str
    message: str
    chain: list[ChainedException] = Field(default_factory=list)


class Frame(BaseModel):
    """One frame from the vaccinated function down to where the exception was raised.

    `library` marks code installed with Python or in site-packages, which a repair does not
    change. `source` and `first_lineno` are given for user callees whose source could be read,
    so that a repair can patch them; the vaccinated function's source is in `FunctionInfo`.
    """

    filename: str
    lineno: int
    function: str
    code: str
    locals: dict[str, Variable] = Field(default_factory=dict)
    qualname: str = ""
    module: str = ""
    library: bool = False
    source: str | None = None
    first_lineno: int | None = None

    @property
    def own_def(self) -> bool:
        """Whether the frame runs a function with a `def` of its own, which a patch can replace: not a
        comprehension, generator expression or lambda (`<listcomp>`, `<genexpr>`, `<lambda>`, whose
        code is part of the function around it; a comprehension has a frame of its own up to Python
        3.11), nor a module's body (`<module>`)."""
        return not self.function.startswith("<")


class FunctionInfo(BaseModel):
    """The vaccinated function and its faulty statement, in the user's own file and lines."""

    name: str
    qualname: str
    source: str
    filename: str
    first_lineno: int
    lineno: int
    statement: str
    kind: str


class Device(BaseModel):
    """One accelerator, with the memory free on it when the report was built."""

    index: int
    name: str
    free_bytes: int | None = None
    total_bytes: int | None = None


class Environment(BaseModel):
    """Versions and devices; never the process environment, which holds credentials."""

    python: str
    platform: str
    torch: str | None = None
    cuda: str | None = None
    devices: list[Device] = Field(default_factory=list)
    grad_enabled: bool | None = None
    """Whether autograd recorded operations in the crashed thread when the crash was reported
    (`torch.is_grad_enabled()`): off, a loss has no graph to go backward through."""


class Attempt(BaseModel):
    """A repair already tried on this crash, and what came of it."""

    decision: str
    outcome: str


MAX_OPERANDS = 32
"""Operands one report describes (`CrashReport.operands`)."""


class Operand(BaseModel):
    """A sub-expression of a faulty statement, evaluated in its frame where that is safe (see
    `daifu.report.operands`), with its facts: `type`, and as they apply `dtype`, `shape`, `device`,
    `min`/`max`, `nan`/`inf`, `value`.

    function: the qualname of the frame it was evaluated in (the vaccinated function, or the deepest
        user callee, whose statement made the failing call).
    expect: what the failing call expects that this operand does not give, when something says so
        (`dtype`, `classes`, `rows`, `int`, `features`, `rows_of`...); wrong: the same, in a sentence.
    """

    expression: str = Field(max_length=500)
    function: str = Field(default="", max_length=500)
    facts: dict[str, Any] = Field(default_factory=dict)
    expect: dict[str, Any] = Field(default_factory=dict)
    wrong: str = Field(default="", max_length=1000)


class Lookup(BaseModel):
    """A lookup of the faulty statement that failed, seen on the live object (`daifu.report.lookups`).

    kind: `key` (a mapping without the key), `attribute` (an object without the attribute), `name` (a
        name no scope holds), `index` (a sequence the index is past), `divisor` (a divisor that is 0).
    function, lineno: the frame's function (its qualname) and file line: the vaccinated function, or a
        user callee below it.
    expression: the sub-expression looked in, as written (`metrics`, `self.history`; for `divisor`,
        the divisor; empty for `name`). wanted: what was looked up: the key as a literal (`'val_acc'`),
        the attribute or the name, the index (`3`), the divisor's value (`0`).
    type: the looked-in object's type; length: its length (entries of a mapping, items of a sequence).
    names: what it holds instead: keys as literals, attribute names, names in scope; the closest to
        `wanted` first, bounded. kinds: the kind of value under each name (`float`, `list[float]`,
        `Tensor`, `Module`, `method`); a sequence's `kinds` has its items' kinds under `item`.
    suggestion: Python's own "Did you mean" for an `AttributeError` or a `NameError`, where the running
        Python exposes it.
    """

    kind: Literal["key", "attribute", "name", "index", "divisor"]
    function: str
    lineno: int
    expression: str = ""
    wanted: str = ""
    type: str = ""
    length: int | None = None
    names: list[str] = Field(default_factory=list)
    kinds: dict[str, str] = Field(default_factory=dict)
    suggestion: str | None = None


class CrashReport(BaseModel):
    """Everything the repair bot is told about one crash.

    operands: the faulty statement's operands, evaluated where safe, the wrong ones named.
    lookups: the failed lookups of the faulty statement on their live objects (a missing key, an
    attribute typo, an index one past the end, a zero divisor), for the repairs that read them.
    """

    exception: ExceptionInfo
    function: FunctionInfo
    frames: list[Frame]
    variables: dict[str, Variable]
    environment: Environment
    tried: list[Attempt] = Field(default_factory=list)
    attempt: int = 1
    truncated: bool = False
    operands: list[Operand] = Field(default_factory=list, max_length=MAX_OPERANDS)
    lookups: list[Lookup] = Field(default_factory=list)


def fingerprint(report: CrashReport) -> str:
    """A stable hash of function, file, line and exception type.

    It leaves out messages and values, so the same crash on several ranks (or epochs) shares it.
    """
    f = report.function
    key = f"{f.qualname}\0{f.filename}\0{f.lineno}\0{report.exception.module}.{report.exception.type}"
    return hashlib.sha256(key.encode()).hexdigest()[:20]


SuggestionKind = Literal["surgery", "action", "patch_function", "retry", "skip", "skip_iteration"]
"""The kinds of repair the bot proposes (`Suggestion`)."""


MAX_QUESTION = 2000
"""Characters of a person's question; the prompt shows a bounded part of each earlier exchange too."""
MAX_EXCHANGES = 20


class Exchange(BaseModel):
    """One earlier round of a console conversation about the crash (`ask` in the `(DaiFu)` console).

    question: what the person asked (`""` for a plain `ask`). answer: the bot's answer, in words.
    tried: what was tried after that answer and how it ended (its suggestions' trials, the one chosen).
    """

    question: str = Field(default="", max_length=MAX_QUESTION)
    answer: str = Field(default="", max_length=8000)
    tried: list[Attempt] = Field(default_factory=list, max_length=MAX_EXCHANGES)


class CrashRequest(BaseModel):
    """A crash report, and optionally which backend should answer (the server's default if not).

    deadline_s: how many seconds the client waits for the answer, from when it sent the request.
        The service answers within it (with the rules engine's answer when the model is too slow,
        503 rather than work on for a client long gone); the server's own deadline
        (`daifu serve --deadline`) is the upper bound.
    question: a person's question about the crash, answered in words (`SuggestResponse.answer`)
        along with the diagnosis and suggestions. conversation: the earlier rounds of the same
        conversation, oldest first; a model sees them, the rules engine answers without them.
    """

    report: CrashReport
    backend: str | None = None
    deadline_s: float | None = Field(default=None, gt=0.0, le=3600.0, allow_inf_nan=False)
    question: str | None = Field(default=None, max_length=MAX_QUESTION)
    conversation: list[Exchange] = Field(default_factory=list, max_length=MAX_EXCHANGES)


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
    """One proposed repair, in the terms of `daifu.core.decisions`.

    surgery: `code` is the whole new `def` of the vaccinated function.
    action: `code` runs in the faulty frame (its locals and globals), then the statement reruns.
    patch_function: `code` is the whole new `def` of a callee, named by `target`
        (`module:qualname`, or `sys.modules['module'].qualname`); its code is replaced in place.
    retry / skip / skip_iteration: no code. `skip` leaves the faulty statement out (the names it
        assigns keep stale values); `skip_iteration` leaves the rest of the loop's iteration out.
    origin: who proposed it: `model` (a language model, through the service's checks) or `rules`
        (the embedded rules engine); `None` from servers that predate the field.
    """

    kind: SuggestionKind
    code: str = ""
    explanation: str
    confidence: float = Field(ge=0.0, le=1.0)
    target: str | None = None
    origin: Literal["model", "rules"] | None = None


class ChatMessage(BaseModel):
    """One message sent to a model."""

    role: str
    content: str


class Usage(BaseModel):
    """Tokens a model call cost, as the model's server counted them."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class Transcript(BaseModel):
    """A model call behind an answer, exactly as made: `daifu report N` shows it.

    messages: what was sent (built from the crash report, which the client redacted).
    reply: the reply's raw text (its content, or a tool call's arguments); `None` when no reply
        came (the notes say why). usage: tokens counted by the model's server, if it said.
    finish_reason: why the model stopped, as its server said. notes: how the reply was read:
        what was dropped and why, what was repaired, whether the call was retried or adapted.
    cut: whether a text was shortened to fit the response's bounds.
    """

    model: str
    messages: list[ChatMessage]
    reply: str | None = None
    usage: Usage | None = None
    finish_reason: str | None = None
    notes: list[str] = Field(default_factory=list)
    cut: bool = False


class DiagnoseResponse(BaseModel):
    """A diagnosis, and who gave it.

    fallback_reason: why the rules engine stood in for the backend asked, wholly or in part (its
        suggestions are added when the model gave none that could be used).
    notes: what the service did with the model's reply: each suggestion it dropped and why, each
        repair it made to the model's code (a decorator restored, a diff applied), in the user's
        file and line numbers.
    answer: the answer to the request's `question`, in words (`None` when none was asked).
    transcript: the model call behind the answer, when a model was called (absent for the
        rules engine, and from servers that predate the field).
    """

    fingerprint: str
    diagnosis: Diagnosis
    backend_used: str
    fallback_reason: str | None = None
    cached: bool = False
    notes: list[str] = Field(default_factory=list)
    answer: str | None = None
    transcript: Transcript | None = None


class SuggestResponse(DiagnoseResponse):
    """A diagnosis and the suggestions, best first."""

    suggestions: list[Suggestion]


class BackendInfo(BaseModel):
    """A backend the server can use, and whether it can work now: configured, and (for a backend that
    calls a model) its endpoint reachable: `reachable` is `None` where nothing was probed."""

    name: str
    available: bool
    detail: str
    reachable: bool | None = None


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


# -- pending repairs: a crashed process waits for a person's decision (approve="remote") ---------

Choice = Literal["apply", "reject", "edit", "skip", "skip_iteration", "retry"]
"""What a person can decide: apply suggestion `candidate`, reject (the exception goes on), edit
(their own surgery or action), skip the statement, skip the iteration, retry the statement."""
CHOICES: tuple[str, ...] = get_args(Choice)
PLAIN_CHOICES: dict[str, tuple[str, str]] = {
    "reject": ("Reject: let the exception go on", "reject: the exception goes on"),
    "skip": ("Skip the statement", "skip the statement"),
    "skip_iteration": ("Skip the rest of the iteration", "skip the rest of the iteration"),
    "retry": ("Retry the statement", "retry the statement"),
}
"""The choices that take a decision by themselves (no suggestion, no code), in the page's order: the
label of the page's button, and what the choice does in words (the page's log, the process's terminal)."""
EditKind = Literal["surgery", "action"]
"""What a person may write themselves (`edit`): a whole new `def`, or statements run in the faulty frame."""
EDIT_KINDS: tuple[str, ...] = get_args(EditKind)


def describe_choice(choice: RepairChoice, kinds: list[str]) -> str:
    """A decision in a few words, as the page, the history and the process's terminal say it; `kinds` are
    the kinds of the repair's candidates, in order."""
    if choice.choice == "apply" and choice.candidate is not None and choice.candidate < len(kinds):
        return f"apply suggestion {choice.candidate + 1} ({kinds[choice.candidate]})"
    if choice.choice == "edit":
        return f"apply an edited {choice.kind or 'repair'}"
    return PLAIN_CHOICES[choice.choice][1] if choice.choice in PLAIN_CHOICES else choice.choice


class JobInfo(BaseModel):
    """Which process is waiting: the job's name (`DAIFU_JOB_NAME`, else the script), host, pid, rank."""

    name: str = Field(max_length=200)
    host: str = Field(max_length=200)
    pid: int
    rank: int | None = None


class PendingCandidate(BaseModel):
    """One suggestion of the bot as the waiting process sees it.

    code: as the bot wrote it (against the report's redacted source). verdict: its trial's one-line
    verdict (`daifu.core.trial.Verdict.describe`), `None` when it was not tried; passed: whether
    that trial passed. problems: why the runtime refuses it (it cannot be applied); needs_person:
    what in its code is outside the allowlist of code that may run unattended.
    """

    kind: SuggestionKind
    code: str = Field(default="", max_length=256 * 1024)
    explanation: str = Field(default="", max_length=8000)
    confidence: float = Field(default=0.0, ge=0.0, le=1.0)
    target: str | None = Field(default=None, max_length=500)
    verdict: str | None = Field(default=None, max_length=4000)
    passed: bool | None = None
    problems: list[str] = Field(default_factory=list, max_length=20)
    needs_person: list[str] = Field(default_factory=list, max_length=50)


class PendingRepairRequest(BaseModel):
    """A crash waiting for a person: the report (redacted), the bot's answer, and each candidate.

    unavailable: the choices the runtime refuses here, with why (`skip_iteration` outside a loop).
    deadline_s: how long the process waits; fallback: what it does then (`raise` or `auto`).
    """

    job: JobInfo
    report: CrashReport
    diagnosis: Diagnosis
    backend_used: str = Field(max_length=100)
    candidates: list[PendingCandidate] = Field(default_factory=list, max_length=16)
    unavailable: dict[str, str] = Field(default_factory=dict)
    deadline_s: float = Field(gt=0.0, allow_inf_nan=False)
    fallback: Literal["raise", "auto"] = "raise"


class PendingCreated(BaseModel):
    """A pending repair's id (in its page's address), the key its process polls with, and the page."""

    id: str
    key: str
    url: str


class RepairChoice(BaseModel):
    """A person's decision on a pending repair.

    candidate: the suggestion to apply (0-based, `apply`). kind and code: the edit (`edit`), a whole
    new `def` (surgery) or statements run in the faulty frame (action). force: apply the edit even if
    its trial does not pass. by: who decides (the name given at login, or the API caller's).
    """

    choice: Choice
    candidate: int | None = Field(default=None, ge=0)
    kind: EditKind | None = None
    code: str = Field(default="", max_length=256 * 1024)
    force: bool = False
    by: str = Field(default="", max_length=100)


class PendingPoll(BaseModel):
    """What the waiting process learns from one long poll.

    waiting: nothing decided yet. proposed: a person's choice (`proposal` numbers it) for the process
    to check and accept or refuse. closed: the repair is over (decided, withdrawn or given up).
    """

    status: Literal["waiting", "proposed", "closed"]
    proposal: int = 0
    choice: RepairChoice | None = None


class ProposalAnswer(BaseModel):
    """The process's answer to a proposal: accepted (it is carried out), or refused with the reason.

    note: what the process found (the edit's trial verdict), shown on the page either way.
    """

    accepted: bool
    reason: str = Field(default="", max_length=4000)
    note: str = Field(default="", max_length=4000)


class Withdrawal(BaseModel):
    """The process stops waiting (its deadline passed, Ctrl-C), and says what it does instead."""

    reason: str = Field(max_length=500)


class PendingState(BaseModel):
    """A pending repair's state, as the decision API reports it.

    status: waiting, proposed (a choice is being checked by the process), decided, withdrawn or
    gone (its process stopped polling). job: the waiting process. outcome: what happened, in a
    sentence; refusal: why the last proposal was refused, when it was.
    """

    id: str
    status: Literal["waiting", "proposed", "decided", "withdrawn", "gone"]
    job: JobInfo | None = None
    outcome: str = ""
    decided_by: str = ""
    refusal: str = ""
    url: str = ""
