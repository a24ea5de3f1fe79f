"""Asking the repair bot about a crash: over HTTP when a URL is configured, else in-process.

A crash must never get worse because the bot is away: when the server cannot be reached or
answers badly, the answer comes from the embedded rules engine instead, with a warning that
names the URL and the error.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import httpx
from pydantic import ValidationError

from daifu.say import say
from repairbot.protocol import CrashReport
from repairbot.protocol import Diagnosis, SuggestResponse, Suggestion

DEFAULT_TIMEOUT = 30.0


@dataclass
class BotAnswer:
    """The bot's diagnosis and suggestions (best first), who answered, and any warning on the way.

    source: the URL asked, or `"in-process"`. backend_used, fallback_reason: as the server said,
    or `"rules"` and the reason the server was not used.
    """

    diagnosis: Diagnosis
    suggestions: list[Suggestion]
    backend_used: str
    source: str
    fallback_reason: str | None = None
    warning: str | None = None


def ask_bot(report: CrashReport, url: str | None, timeout: float = DEFAULT_TIMEOUT) -> BotAnswer:
    """The repair bot's answer for `report`: from the server at `url`, or in-process if `url` is None."""
    if url is None:
        return _in_process(report)
    try:
        reply = _post(report, url, timeout)
    except (httpx.HTTPError, ValueError) as error:  # ValueError: a reply that is not our JSON
        warning = f"The repair bot at {url} failed ({_describe(error)}); using the embedded rules engine instead."
        say(warning)
        answer = _in_process(report)
        answer.fallback_reason, answer.warning = warning, warning
        return answer
    return BotAnswer(
        diagnosis=reply.diagnosis,
        suggestions=reply.suggestions,
        backend_used=reply.backend_used,
        source=url,
        fallback_reason=reply.fallback_reason,
    )


def _post(report: CrashReport, url: str, timeout: float) -> SuggestResponse:
    headers = {"Authorization": f"Bearer {token}"} if (token := os.environ.get("DAIFU_REPAIRBOT_TOKEN")) else {}
    response = httpx.post(
        f"{url.rstrip('/')}/v1/suggest",
        content=_body(report),
        timeout=timeout,
        headers={"Content-Type": "application/json", **headers},
    )
    response.raise_for_status()
    try:
        return SuggestResponse.model_validate_json(response.content)
    except ValidationError as error:
        raise ValueError(f"the reply does not follow the protocol: {error.error_count()} errors") from error


def _body(report: CrashReport) -> bytes:
    return ('{"report": ' + report.model_dump_json() + "}").encode()


def _describe(error: Exception) -> str:
    if isinstance(error, httpx.HTTPStatusError):
        return f"HTTP {error.response.status_code}"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _in_process(report: CrashReport) -> BotAnswer:
    from repairbot.rules import analyse  # the rules engine is only loaded when a crash needs it

    diagnosis, suggestions = analyse(report)
    return BotAnswer(diagnosis=diagnosis, suggestions=suggestions, backend_used="rules", source="in-process")
