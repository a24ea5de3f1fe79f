"""Path problems: saving into a folder that does not exist, loading from a mistyped path."""

from __future__ import annotations

import os
import re
from typing import Any

from repairbot.protocol import Suggestion
from repairbot.rules.context import ReportView, Finding, present, search

_MISSING_PARENT = r"Parent directory (.+?) does not exist"
_NO_SUCH_FILE = r"No such file or directory: '([^']+)'"


def missing_parent(ctx: ReportView) -> Finding | None:
    """A save into a folder not made yet: make it (and its parents), then save again."""
    found = search(_MISSING_PARENT, ctx.message)
    folder = found.group(1).rstrip(".") if found else _saving_into_missing_folder(ctx)
    if folder is None:
        return None
    return Finding(
        "path",
        f"The folder {folder!r} does not exist, so nothing can be saved into it.",
        present(
            ctx.outer().action(
                f"import os\nos.makedirs({folder!r}, exist_ok=True)", f"Create {folder!r}, then save again.", 0.9
            )
        ),
    )


def _saving_into_missing_folder(ctx: ReportView) -> str | None:
    found = search(_NO_SUCH_FILE, ctx.message)
    if not found or not re.search(r"save|open\(.*['\"][wax]|write|mkstemp|to_csv|dump", ctx.statement):
        return None
    paths = [f for _, f in _path_facts(ctx) if f.get("path") == found.group(1)]
    if paths and not paths[0].get("parent_exists"):
        return str(paths[0]["parent"])
    return None


def mistyped_path(ctx: ReportView) -> Finding | None:
    """A load from a path that does not exist, next to a file with a close name: use that file."""
    found = search(_NO_SUCH_FILE, ctx.message)
    if not found:
        return None
    missing = found.group(1)
    ctx = ctx.outer()  # the path is rebound where the action runs
    suggestions: list[Suggestion | None] = []
    for name, facts in _path_facts(ctx):
        if facts.get("path") == missing and facts.get("close"):
            suggestions.append(_rebind(ctx, name, facts))
    if not suggestions:
        suggestions.append(_search_at_run_time(ctx, missing))
    return Finding("path", f"{missing!r} does not exist.", present(*suggestions))


def _path_facts(ctx: ReportView) -> list[tuple[str, dict[str, Any]]]:
    return [(n, ctx.facts(n)) for n in ctx.variables if "path" in ctx.facts(n)]


def _rebind(ctx: ReportView, name: str, facts: dict[str, Any]) -> Suggestion | None:
    better = os.path.join(os.path.dirname(str(facts["path"])), str(facts["close"][0]))
    value = repr(better) if ctx.variables[name].type == "str" else f"pathlib.Path({better!r})"
    code = f"{name} = {value}" if value.startswith("'") else f"import pathlib\n{name} = {value}"
    return ctx.action(code, f"`{name}` names a missing file; {better!r} exists and is the closest name.", 0.8)


def _search_at_run_time(ctx: ReportView, missing: str) -> Suggestion | None:
    """Without a near name in the report, let the action look in the folder itself."""
    names = [n for n, f in _path_facts(ctx) if f.get("path") == missing and f.get("parent_exists")]
    if not names:
        return None
    n = names[0]
    as_path = ctx.variables[n].type != "str"  # a pathlib path stays one
    code = (
        f"import difflib, os{', pathlib' if as_path else ''}\n_daifu_dir = os.path.dirname(os.fspath({n})) or '.'\n"
        f"_daifu_near = difflib.get_close_matches(os.path.basename(os.fspath({n})), os.listdir(_daifu_dir), n=1)\n"
        f"{n} = {'pathlib.Path' if as_path else ''}(os.path.join(_daifu_dir, _daifu_near[0])) if _daifu_near else {n}\n"
        "del _daifu_dir, _daifu_near"
    )
    return ctx.action(code, f"Point `{n}` at the existing file with the closest name, if there is one.", 0.5)


RULES = [missing_parent, mistyped_path]
