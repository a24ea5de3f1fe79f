"""The `openai` backend: any OpenAI-compatible Chat Completions endpoint, through the official SDK.

Configuration (environment): `OPENAI_API_KEY`; the base URL from `DAIFU_OPENAI_BASE_URL`, else
`OPENAI_BASE_URL`, else the SDK's default; the model from `DAIFU_OPENAI_MODEL`. Retries with
back-off on 429 and 5xx are the SDK's (`max_retries`). Whatever goes wrong, the answer comes from
the rules engine instead, with `fallback_reason` saying what went wrong; the key is never in it.
"""

from __future__ import annotations

import json
import os
from typing import Any

import openai
from pydantic import BaseModel, ValidationError

from repairbot.protocol import CrashReport
from repairbot.backends import Answer, RulesBackend
from repairbot.prompts import PromptError, read, render
from repairbot.protocol import BackendInfo, Diagnosis, Suggestion, SuggestionKind
from repairbot.rules.context import Context

DEFAULT_MODEL = "gpt-4o-mini"


class LLMFailure(RuntimeError):
    """The model could not be reached, or its reply was not what was asked; the message says which."""


class _Suggestions(BaseModel):
    suggestions: list[Suggestion]


class OpenAIBackend:
    """Asks the model for a diagnosis, a code fix (surgery, or a patch of the faulty callee) and actions.

    api_key, base_url, model: override the environment. timeout: seconds for each request.
    max_retries: the SDK's retries, with exponential back-off, on connection errors, 408, 409,
        429 and 5xx (honouring `Retry-After`).
    """

    name = "openai"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        model: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
    ) -> None:
        self._key = api_key or os.environ.get("OPENAI_API_KEY")
        self._base_url = base_url or os.environ.get("DAIFU_OPENAI_BASE_URL") or os.environ.get("OPENAI_BASE_URL")
        self.model = model or os.environ.get("DAIFU_OPENAI_MODEL") or DEFAULT_MODEL
        self._client = (
            None
            if not self._key
            else openai.OpenAI(api_key=self._key, base_url=self._base_url, timeout=timeout, max_retries=max_retries)
        )
        self._rules = RulesBackend()

    def info(self) -> BackendInfo:
        where = self._base_url or "the SDK's default URL"
        if self._client is None:
            return BackendInfo(name=self.name, available=False, detail="OPENAI_API_KEY is not set")
        return BackendInfo(name=self.name, available=True, detail=f"model {self.model} at {where}")

    def diagnose(self, report: CrashReport) -> Answer:
        try:
            return Answer(self._diagnosis(report), [], self.name)
        except LLMFailure as failure:
            return self._fallback(self._rules.diagnose(report), failure)

    def suggest(self, report: CrashReport) -> Answer:
        try:
            diagnosis = self._diagnosis(report)
            text = f"{diagnosis.category}: {diagnosis.explanation}"
            ctx = Context(report)
            if ctx.at_function:
                fixes = self._suggestions(render("surgery", report, text), {"surgery", "retry", "skip"})
            else:
                fixes = self._suggestions(render("patch", report, text, ctx.site), {"patch_function"})
                fixes = [s.model_copy(update={"target": ctx.callee_target()}) for s in fixes]
            actions = self._suggestions(render("action", report, text), {"action"})
        except (LLMFailure, PromptError) as failure:
            return self._fallback(self._rules.suggest(report), failure)
        ranked = sorted(fixes + actions, key=lambda s: -s.confidence)
        return Answer(diagnosis, ranked, self.name)

    def _fallback(self, answer: Answer, failure: Exception) -> Answer:
        reason = f"{self.name} backend failed: {failure}"
        if self._key:
            reason = reason.replace(self._key, "<redacted>")
        answer.fallback_reason = reason
        return answer

    def _diagnosis(self, report: CrashReport) -> Diagnosis:
        try:
            prompt = render("diagnosis", report)
        except PromptError as error:
            raise LLMFailure(str(error)) from error
        return _validated(Diagnosis, self._ask(prompt))

    def _suggestions(self, prompt: str, kinds: set[SuggestionKind] | set[str]) -> list[Suggestion]:
        found = _validated(_Suggestions, self._ask(prompt)).suggestions
        wrong = [s.kind for s in found if s.kind not in kinds]
        if wrong:
            raise LLMFailure(f"the model answered kinds {wrong}, not one of {sorted(kinds)}")
        return [s for s in found if s.kind in ("retry", "skip") or s.code.strip()]

    def _ask(self, prompt: str) -> Any:
        """The model's reply to `prompt`, parsed as a JSON object."""
        if self._client is None:
            raise LLMFailure("OPENAI_API_KEY is not set")
        try:
            completion = self._client.chat.completions.create(
                model=self.model,
                messages=[{"role": "system", "content": read("system")}, {"role": "user", "content": prompt}],
                response_format={"type": "json_object"},
                temperature=0,
            )
        except openai.APITimeoutError as error:
            raise LLMFailure("the request timed out") from error
        except openai.APIStatusError as error:
            raise LLMFailure(f"HTTP {error.status_code} from the model's endpoint") from error
        except openai.OpenAIError as error:
            raise LLMFailure(f"{type(error).__name__}: {error}") from error
        except PromptError as error:
            raise LLMFailure(str(error)) from error
        content = completion.choices[0].message.content if completion.choices else None
        if not content:
            raise LLMFailure("the model's reply was empty")
        try:
            return json.loads(content)
        except json.JSONDecodeError as error:
            raise LLMFailure(f"the model's reply is not JSON ({error.msg} at character {error.pos})") from error


def _validated(model: type[Any], data: Any) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the reply"
        raise LLMFailure(f"the model's reply does not match the schema: {where}: {first['msg']}") from error
