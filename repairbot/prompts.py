"""The LLM prompts: template files in `prompts/`, filled in from a crash report.

The folder is `$DAIFU_PROMPTS_DIR` if set, else `prompts/` beside the `repairbot` package, so a
user can tune the wording without touching code. Templates use `string.Template` (`$name`).
"""

from __future__ import annotations

import os
from pathlib import Path
from string import Template

from repairbot.protocol import CrashReport, Frame

_MAX_VARIABLES = 12_000


class PromptError(RuntimeError):
    """A template is missing or names a value the renderer does not provide."""


def prompts_dir() -> Path:
    """Where the templates are read from."""
    configured = os.environ.get("DAIFU_PROMPTS_DIR")
    return Path(configured) if configured else Path(__file__).resolve().parent.parent / "prompts"


def read(name: str) -> str:
    """The text of template `name` (`system`, `diagnosis`, `surgery`, `action`, `patch`)."""
    path = prompts_dir() / f"{name}.txt"
    try:
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise PromptError(f"Prompt template {str(path)!r} cannot be read: {error.strerror}.") from error


def render(name: str, report: CrashReport, diagnosis: str = "", site: Frame | None = None) -> str:
    """Template `name` filled in from `report`, the diagnosis so far, and the frame to patch."""
    try:
        return Template(read(name)).substitute(_values(report, diagnosis, site))
    except (KeyError, ValueError) as error:
        raise PromptError(
            f"Prompt template {name!r} in {str(prompts_dir())!r} has an unknown or malformed placeholder: {error}."
        ) from error


def _values(report: CrashReport, diagnosis: str, site: Frame | None) -> dict[str, str]:
    f, e = report.function, report.exception
    values = {
        "exception_type": e.type,
        "exception_message": e.message,
        "exception_chain": "".join(f"({link.relation}: {link.type}: {link.message})\n" for link in e.chain),
        "filename": f.filename,
        "qualname": f.qualname,
        "lineno": str(f.lineno),
        "statement": f.statement.rstrip(),
        "numbered_source": numbered(f.source, f.first_lineno, f.lineno),
        "frames": "\n".join(
            f"  {fr.filename}:{fr.lineno} in {fr.function}: {fr.code}" + (" [library]" if fr.library else "")
            for fr in report.frames
        ),
        "variables": _variables(report.variables),
        "diagnosis": diagnosis,
    }
    site = site or report.frames[-1]
    values.update(
        callee=site.qualname or site.function,
        callee_filename=site.filename,
        callee_lineno=str(site.lineno),
        callee_line=site.code,
        callee_source=numbered(site.source or "", site.first_lineno or 1, site.lineno)
        if site.source
        else "(unavailable)",
        callee_variables=_variables(site.locals),
    )
    return values


def numbered(source: str, first_lineno: int, mark: int) -> str:
    """Source with file line numbers, the line `mark` flagged with `>>`."""
    return "\n".join(
        f"{'>>' if first_lineno + i == mark else '  '} {first_lineno + i:5d}  {line}"
        for i, line in enumerate(source.splitlines())
    )


def _variables(variables: dict) -> str:  # type: ignore[type-arg]
    text = "\n".join(f"  {name}: {v.text}" for name, v in variables.items())
    return text[:_MAX_VARIABLES] or "  (none)"
