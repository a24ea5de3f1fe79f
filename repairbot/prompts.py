"""The LLM prompt: one request per crash, from template files in `prompts/` filled in from the report.

The folder is `$DAIFU_PROMPTS_DIR` if set, so a user can tune the wording without touching code;
else the templates of the installed package (a wheel carries the project's top-level `prompts/`
folder as `repairbot/templates/`), or, in a source tree, `prompts/` beside the `repairbot` package.
Templates use `string.Template` (`$name`): `system.txt` is the system message, `repair.txt` the
user message; when a person at the console asks (`ask [question]`), `conversation.txt` (the earlier
rounds) and `question.txt` (the question, and the `answer` field it adds to the reply) follow it in
the same message.

Everything the model needs is sent once: the numbered source of the paused function (and of the
callee where the crash happened below it), the live values with the facts the rules engine reads
(shapes, dtypes, contiguity, layer sizes, paths), what was tried at this site, and the rules
engine's own diagnosis as a hint. Sizes are bounded so a crash costs about 2k tokens.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from string import Template
from typing import Any

from collections.abc import Sequence

from repairbot.llm_parse import MODEL_KINDS
from repairbot.protocol import CATEGORIES, CrashReport, Exchange, Frame, Variable
from repairbot.protocol import Diagnosis
from repairbot.rules.context import ReportView

MAX_LISTING_LINES = 120
"""A longer function is shown around the paused line only."""
MAX_VARIABLES_CHARS = 4000
MAX_MESSAGE_CHARS = 1500
MAX_TRIED = 5
MAX_EXCHANGES = 3
"""Earlier rounds of a console conversation shown to the model (the latest ones): about 200 tokens each."""
MAX_QUESTION_CHARS = 300
MAX_ANSWER_CHARS = 500
MAX_EXCHANGE_TRIED = 4
"""Tried repairs shown per round: the first ones (best ranked) and the last (what the person chose)."""
MAX_TRIED_CHARS = 120
"""Characters of a tried repair's description, and of its outcome, in a conversation round."""


class PromptError(RuntimeError):
    """A template is missing or names a value the renderer does not provide."""


def prompts_dir() -> Path:
    """Where the templates are read from."""
    configured = os.environ.get("DAIFU_PROMPTS_DIR")
    if configured:
        return Path(configured)
    package = Path(__file__).resolve().parent
    installed = package / "templates"
    return installed if installed.is_dir() else package.parent / "prompts"


def read(name: str) -> str:
    """The text of template `name` (`system`, `repair`)."""
    path = prompts_dir() / f"{name}.txt"
    try:
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise PromptError(f"Prompt template {str(path)!r} cannot be read: {error.strerror}.") from error


def messages(
    report: CrashReport,
    hint: Diagnosis | None = None,
    question: str | None = None,
    conversation: Sequence[Exchange] = (),
) -> list[dict[str, str]]:
    """The chat messages asking for a diagnosis and repairs of `report`.

    hint: the rules engine's diagnosis, shown to the model as an offline analysis.
    question, conversation: a person's question and the earlier rounds (the console's `ask`),
    appended to the one user message: the crash is sent once, as it is now, with them.
    """
    user = render("repair", values(report, hint))
    if conversation:
        user += "\n" + render("conversation", {"exchanges": exchanges(conversation)})
    if question:
        user += "\n" + render("question", {"question": _one_line(_cut(question, MAX_QUESTION_CHARS))})
    return [{"role": "system", "content": read("system").strip()}, {"role": "user", "content": user}]


def exchanges(conversation: Sequence[Exchange]) -> str:
    """The latest rounds of a conversation, each bounded: question, answer, and what was tried after it."""
    shown = list(conversation)[-MAX_EXCHANGES:]
    lines = [f"  ({len(conversation) - len(shown)} earlier rounds not shown)"] if len(shown) < len(conversation) else []
    for exchange in shown:
        lines.append(f"  Q: {_one_line(_cut(exchange.question, MAX_QUESTION_CHARS)) or '(no question: a diagnosis)'}")
        lines.append(f"  A: {_one_line(_cut(exchange.answer, MAX_ANSWER_CHARS))}")
        lines += [
            f"  then: {_cut(_one_line(a.decision), MAX_TRIED_CHARS)} -> {_cut(_one_line(a.outcome), MAX_TRIED_CHARS)}"
            for a in _first_and_last(exchange.tried, MAX_EXCHANGE_TRIED)
        ]
    return "\n".join(lines)


def render(name: str, values: dict[str, str]) -> str:
    try:
        return Template(read(name)).substitute(values).strip() + "\n"
    except (KeyError, ValueError) as error:
        raise PromptError(
            f"Prompt template {name!r} in {str(prompts_dir())!r} has an unknown or malformed placeholder: {error}."
        ) from error


def values(report: CrashReport, hint: Diagnosis | None = None) -> dict[str, str]:
    """What the placeholders of `repair.txt` stand for."""
    f, ctx = report.function, ReportView(report)
    return {
        "exception": _exception(report),
        "filename": f.filename,
        "qualname": f.qualname,
        "lineno": str(f.lineno),
        "listing": numbered(f.source, f.first_lineno, f.lineno),
        "callee": "" if ctx.at_function else _callee(ctx.site),
        "stack": _stack(report.frames),
        "variables": variables(report.variables, _mentioned(f.statement, f.source)),
        "tried": _tried(report),
        "hints": _hint(hint),
        "categories": ", ".join(f'"{c}"' for c in CATEGORIES),
        "kinds": " | ".join(f'"{kind}"' for kind in MODEL_KINDS),
    }


def _first_and_last(items: list[Any], count: int) -> list[Any]:
    """At most `count` of `items`: the first ones and the last."""
    return items if len(items) <= count else items[: count - 1] + items[-1:]


def numbered(source: str, first_lineno: int, mark: int) -> str:
    """Source with file line numbers, line `mark` flagged with `>>`; a long one shown around `mark`."""
    lines = source.splitlines()
    shown = range(len(lines))
    if len(lines) > MAX_LISTING_LINES:
        centre = mark - first_lineno
        low = max(0, min(centre - MAX_LISTING_LINES // 2, len(lines) - MAX_LISTING_LINES))
        shown = range(low, low + MAX_LISTING_LINES)
    text = [f"{'>>' if first_lineno + i == mark else '  '}{first_lineno + i:>4}  {lines[i]}".rstrip() for i in shown]
    if shown.start > 0:
        text.insert(0, f"  ... ({shown.start} lines above not shown)")
    if shown.stop < len(lines):
        text.append(f"  ... ({len(lines) - shown.stop} lines below not shown)")
    return "\n".join(text)


def _exception(report: CrashReport) -> str:
    e = report.exception
    text = [f"{e.type}: {_cut(e.message, MAX_MESSAGE_CHARS)}"]
    text += [
        f"({'caused by' if link.relation == 'cause' else 'while handling'} {link.type}: {_cut(link.message, 300)})"
        for link in e.chain
    ]
    return "\n".join(text)


def _callee(site: Frame) -> str:
    listing = numbered(site.source or "", site.first_lineno or 1, site.lineno)
    name = site.qualname or site.function
    return (
        f"\nIt raised below, in `{name}` (line {site.lineno} of {site.filename}), which it calls; "
        f"an edit may change this function too:\n{listing}\n"
        f"Live values in `{name}`:\n{variables(site.locals, _mentioned(site.code, site.source or ''))}\n"
    )


def _stack(frames: list[Frame]) -> str:
    """The user's frames, and the last library frame: where the exception was raised."""
    shown = [f for f in frames if not f.library]
    if frames and frames[-1].library:
        shown.append(frames[-1])
    return "\n".join(
        f"  {_short(f.filename) if f.library else f.filename}:{f.lineno} in {f.function}: {f.code}"
        + (" [library]" if f.library else "")
        for f in shown
    )


def _short(filename: str) -> str:
    """A library file's path from its package down (`torch/nn/modules/linear.py`): the rest is noise."""
    return re.sub(r"^.*[/\\](?:site|dist)-packages[/\\]", "", filename)


def _mentioned(statement: str, source: str) -> list[str]:
    """Names in the statement, then in the rest of the source, in order, each once."""
    names = re.findall(r"[A-Za-z_]\w*", statement) + re.findall(r"[A-Za-z_]\w*", source)
    return list(dict.fromkeys(names))


def variables(found: dict[str, Variable], order: list[str]) -> str:
    """One line per value, those the statement uses first, bounded in size."""
    ranked = [n for n in order if n in found] + [n for n in found if n not in order]
    text: list[str] = []
    size = 0
    for name in ranked:
        line = f"  {name}: {_one_line(found[name].text)}{_facts(found[name].facts)}"
        if size + len(line) > MAX_VARIABLES_CHARS:
            text.append(f"  ... ({len(ranked) - len(text)} more not shown)")
            break
        text.append(line)
        size += len(line) + 1
    return "\n".join(text) or "  (none)"


def _facts(facts: dict[str, Any]) -> str:
    """The facts a value's text does not already say: contiguity, layer sizes, near file names."""
    extra = []
    if facts.get("contiguous") is False:
        extra.append("not contiguous")
    if facts.get("linears"):
        extra.append("layers " + ", ".join(f"{p or '(self)'}: {i}->{o}" for p, i, o in facts["linears"][:8]))
    if facts.get("close"):
        extra.append(f"near names {facts['close']}")
    return f" [{'; '.join(extra)}]" if extra else ""


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def _tried(report: CrashReport) -> str:
    if not report.tried:
        return ""
    lines = [f"  {_cut(_one_line(a.decision), 300)} -> {_one_line(a.outcome)}" for a in report.tried[-MAX_TRIED:]]
    return "\nAlready tried at this line (oldest first); do not propose these again:\n" + "\n".join(lines) + "\n"


def _hint(hint: Diagnosis | None) -> str:
    if hint is None or hint.category == "unknown":
        return ""
    first = hint.explanation.split("\n")[0]
    return f"\nDaiFu's offline rules say ({hint.category}): {first}\n"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
