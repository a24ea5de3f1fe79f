"""Bounds on what analysis reads and on what an answer holds.

A report is untrusted input: one 200 KB exception message cost 30 s of CPU in a single rules
regex (and the regex holds the GIL, so the whole service stalled), and 300 float locals made a
46 MB answer. So the rules see a bounded view of the report (`bounded_report`), and every
backend's answer is cut to a bounded size (`bounded_suggestions`, `bounded_diagnosis`) before it
is cached or sent.
"""

from __future__ import annotations

from repairbot.protocol import CrashReport, Diagnosis, Suggestion, Transcript

MAX_MESSAGE = 4096
"""Characters of each exception message (and of each chained one) that patterns are matched on."""
MAX_CHAIN = 6
MAX_STATEMENT = 4096
"""Characters of the faulty statement the rules tokenize."""
MAX_CODE_LINE = 500
"""Characters of each frame's line of code, as quoted in explanations."""
MAX_SOURCE = 64 * 1024
"""Characters of a function's source the rules will edit; a longer function gets no surgery from them."""
MAX_VALUE_TEXT = 300

MAX_SUGGESTIONS = 12
"""Suggestions in one answer. The offline engine generates candidate edits for the client to try in turn
(`repairbot.generate`), up to `daifu`'s `max_trials` (8) of them: 12 leaves room past those for the ones a
client cannot use (outside its allowlist, refused by its checks) and for the rules' actions and control
decisions, which cost a trial each."""
MAX_WHOLE_DEFS = 10
"""Suggestions carrying a whole `def` (surgery, patch_function): each repeats the function's source
(at most `MAX_SOURCE` characters), so an answer stays under 1 MiB of code. Generated candidates are mostly
surgeries, one edit each."""
MAX_CODE = 64 * 1024
"""Characters of one suggestion's code; a longer one is dropped."""
MAX_TARGET = 2000
"""Characters of a patch_function's `target` expression; a longer one is dropped (a cut one would be wrong)."""
MAX_EXPLANATION = 2000
MAX_DIAGNOSIS = 8000
MAX_PATH = 4096
MAX_ANSWER = 4000
"""Characters of the answer in words to a person's question."""
MAX_MESSAGE_TEXT = 48 * 1024
"""Characters of each message of a transcript; the prompt is bounded to far less by construction."""
MAX_REPLY_TEXT = 32 * 1024
"""Characters of a transcript's raw reply (a reasoning model at 4,000 tokens writes about 16 KB)."""
MAX_MESSAGES = 8
MAX_NOTES = 40
MAX_NOTE = 1000


def cut(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, with an ellipsis saying it was cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def bounded_report(report: CrashReport) -> CrashReport:
    """The view of `report` the rules work on: every text a pattern or a parser reads is bounded.

    A source over `MAX_SOURCE` is left out (the rules then propose no edit of it), never cut: a
    cut `def` would make a broken surgery. The original report is not changed.
    """
    e, f = report.exception, report.function
    exception = e.model_copy(
        update={
            "message": cut(e.message, MAX_MESSAGE),
            "chain": [c.model_copy(update={"message": cut(c.message, MAX_MESSAGE)}) for c in e.chain[:MAX_CHAIN]],
        }
    )
    function = f.model_copy(
        update={"statement": cut(f.statement, MAX_STATEMENT), "source": f.source if len(f.source) <= MAX_SOURCE else ""}
    )
    frames = [
        frame.model_copy(
            update={
                "code": cut(frame.code, MAX_CODE_LINE),
                "source": frame.source if frame.source is None or len(frame.source) <= MAX_SOURCE else None,
            }
        )
        for frame in report.frames
    ]
    variables = {
        name: v if len(v.text) <= MAX_VALUE_TEXT else v.model_copy(update={"text": cut(v.text, MAX_VALUE_TEXT)})
        for name, v in report.variables.items()
    }
    return report.model_copy(
        update={"exception": exception, "function": function, "frames": frames, "variables": variables}
    )


def bounded_suggestions(suggestions: list[Suggestion]) -> list[Suggestion]:
    """`suggestions` best first, each once, at most `MAX_SUGGESTIONS` of them.

    A suggestion with code over `MAX_CODE` characters (or a target over `MAX_TARGET`) is dropped,
    and at most `MAX_WHOLE_DEFS` suggestions carry a whole `def`, so an answer holds the function's
    source a few times at most, not once per name.
    """
    unique: dict[tuple[str, str, str | None], Suggestion] = {}
    for suggestion in sorted(suggestions, key=lambda s: -s.confidence):
        if len(suggestion.code) <= MAX_CODE and len(suggestion.target or "") <= MAX_TARGET:
            unique.setdefault((suggestion.kind, suggestion.code, suggestion.target), suggestion)
    kept: list[Suggestion] = []
    whole_defs = 0
    for suggestion in unique.values():
        if suggestion.kind in ("surgery", "patch_function"):
            if whole_defs == MAX_WHOLE_DEFS:
                continue
            whole_defs += 1
        kept.append(_with_short_explanation(suggestion))
        if len(kept) == MAX_SUGGESTIONS:
            break
    return kept


def _with_short_explanation(suggestion: Suggestion) -> Suggestion:
    if len(suggestion.explanation) <= MAX_EXPLANATION:
        return suggestion
    return suggestion.model_copy(update={"explanation": cut(suggestion.explanation, MAX_EXPLANATION)})


def bounded_diagnosis(diagnosis: Diagnosis) -> Diagnosis:
    """`diagnosis` with its texts cut to a few thousand characters."""
    culprit = diagnosis.culprit
    return diagnosis.model_copy(
        update={
            "category": cut(diagnosis.category, 100),
            "explanation": cut(diagnosis.explanation, MAX_DIAGNOSIS),
            "culprit": culprit.model_copy(
                update={
                    "reason": cut(culprit.reason, MAX_EXPLANATION),
                    "function": cut(culprit.function, MAX_EXPLANATION),
                    "filename": cut(culprit.filename, MAX_PATH),
                }
            ),
        }
    )


def bounded_transcript(transcript: Transcript) -> Transcript:
    """`transcript` with each text cut to its bound, and `cut` set if any was; the model's name too."""
    messages = [
        m if len(m.content) <= MAX_MESSAGE_TEXT else m.model_copy(update={"content": cut(m.content, MAX_MESSAGE_TEXT)})
        for m in transcript.messages[:MAX_MESSAGES]
    ]
    reply = None if transcript.reply is None else cut(transcript.reply, MAX_REPLY_TEXT)
    notes = [cut(note, MAX_NOTE) for note in transcript.notes[:MAX_NOTES]]
    shortened = (
        len(transcript.messages) > MAX_MESSAGES
        or any(a.content != b.content for a, b in zip(messages, transcript.messages))
        or reply != transcript.reply
        or notes != transcript.notes
    )
    return transcript.model_copy(
        update={
            "model": cut(transcript.model, MAX_EXPLANATION),
            "messages": messages,
            "reply": reply,
            "notes": notes,
            "finish_reason": None if transcript.finish_reason is None else cut(transcript.finish_reason, 100),
            "cut": transcript.cut or shortened,
        }
    )
