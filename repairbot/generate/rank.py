"""Ranking the candidates of one crash: generated edits and the message rules' suggestions together.

The order, best first:

1. every candidate that gives nothing up before any that does (dropping elements, replacing bad
   values or skipping a statement that only reports; passing over an item or skipping an iteration; skipping a statement, discarding trained state — in that order);
2. the firmer the evidence, the earlier (`GeneratedRepair.evidence`);
3. the smaller the edit, the earlier: syntax nodes changed, plus two for each new name;
4. the rules' (or the family's) confidence.

The answer holds each repair once and at most `MAX_CANDIDATES`; trials in the training process
then try them in this order (the service cannot: it holds no live state). Confidences are made
non-increasing down the list, so a consumer that sorts by confidence keeps this order.
"""

from __future__ import annotations

import ast
import re
import textwrap

from repairbot.bounds import MAX_CODE, MAX_SUGGESTIONS, MAX_TARGET, MAX_WHOLE_DEFS
from repairbot.generate.candidate import (
    DISCARDS_STATE,
    DROPS_ELEMENTS,
    REPLACES_DATA,
    REPLACES_NONFINITE,
    PASSES_ITEM,
    SKIPS_ITERATION,
    SKIPS_REPORT,
    SKIPS_STATEMENT,
    GeneratedRepair,
    measure,
)
from repairbot.generate.view import FunctionSite
from repairbot.protocol import Suggestion
from repairbot.signs import parse

MAX_CANDIDATES = MAX_SUGGESTIONS
_GIVING_UP = {"": 0, DROPS_ELEMENTS: 1, REPLACES_DATA: 1, REPLACES_NONFINITE: 1, SKIPS_REPORT: 1,
              PASSES_ITEM: 2, SKIPS_ITERATION: 2, SKIPS_STATEMENT: 3, DISCARDS_STATE: 4}
_NEW_STATE = re.compile(r"\b(?:nn|torch\.nn)\.[A-Z]\w*\(|\b(?:optim|torch\.optim)\.[A-Z]\w*\(|\.add_param_group\(")


def from_rules(suggestion: Suggestion) -> GeneratedRepair:
    """A rule's suggestion as a candidate: its evidence read from its confidence."""
    evidence = 2 if suggestion.confidence >= 0.8 else 1 if suggestion.confidence >= 0.5 else 0
    return GeneratedRepair(
        kind=suggestion.kind, explanation=suggestion.explanation, family="rules", evidence=evidence,
        code=suggestion.code, target=suggestion.target, confidence=suggestion.confidence,
    )


def ranked(candidates: list[GeneratedRepair], sites: list[FunctionSite]) -> list[GeneratedRepair]:
    """`candidates` measured, labelled, ranked, each once, bounded (see the module docstring)."""
    sources = {site.target: site.source for site in sites}
    known = {name for site in sites for name in site.variables}
    measured = []
    for candidate in candidates:
        if len(candidate.code) > MAX_CODE or len(candidate.target or "") > MAX_TARGET:
            continue
        candidate.gives_up = candidate.gives_up or _gives_up(candidate, sources)
        measured.append(measure(candidate, sources.get(candidate.target if candidate.kind != "action" else "-"), known))
    measured.sort(key=_key)
    kept: list[GeneratedRepair] = []
    seen: set[tuple[str, str, str | None]] = set()
    whole_defs = 0
    for candidate in measured:
        identity = (candidate.kind, _canonical(candidate.code), candidate.target)
        if identity in seen:
            continue
        if candidate.kind in ("surgery", "patch_function"):
            if whole_defs == MAX_WHOLE_DEFS:
                continue
            whole_defs += 1
        seen.add(identity)
        kept.append(candidate)
        if len(kept) == MAX_CANDIDATES:
            break
    return kept


def suggestions(kept: list[GeneratedRepair]) -> list[Suggestion]:
    """The ranked candidates as the protocol's suggestions, confidences non-increasing down the list."""
    suggestions = [candidate.suggestion() for candidate in kept]
    for index in range(1, len(suggestions)):
        previous = suggestions[index - 1].confidence
        if suggestions[index].confidence > previous:
            suggestions[index] = suggestions[index].model_copy(update={"confidence": previous})
    return suggestions


def _key(candidate: GeneratedRepair) -> tuple[int, int, int, float]:
    return (
        _GIVING_UP.get(candidate.gives_up, 5),
        -candidate.evidence,
        candidate.cost + 2 * candidate.new_names,
        -(candidate.confidence if candidate.confidence is not None else 0.45 + 0.2 * candidate.evidence),
    )


def _gives_up(candidate: GeneratedRepair, sources: dict[str | None, str]) -> str:
    """What a candidate loses, read from what it is: a skip, or code that builds a new layer or optimizer."""
    if candidate.kind == "skip_iteration":
        return SKIPS_ITERATION
    if candidate.kind == "skip":
        return SKIPS_STATEMENT
    if candidate.kind in ("action", "surgery", "patch_function"):
        old = sources.get(candidate.target, "") if candidate.kind != "action" else ""
        unchanged = {line.strip() for line in old.splitlines()}
        if any(_NEW_STATE.search(line) and line.strip() not in unchanged for line in candidate.code.splitlines()):
            return DISCARDS_STATE
    return ""


def _canonical(code: str) -> str:
    """Code compared by its syntax tree, so layout does not make two repairs differ."""
    tree = parse(textwrap.dedent(code)) if code else None
    return ast.dump(tree) if tree is not None else code
