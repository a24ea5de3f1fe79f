"""Ranking the candidates of one crash: generated edits and the message rules' suggestions together.

The order, best first:

1. by what it gives up (`repairbot.giving_up`): a candidate that changes a value (an edit, a cast, a
   key, a retry) before any that passes over work, and among those the smaller give-up first — the
   skip of a statement that only reports, then rows of a batch dropped (or their bad values replaced),
   then an item or the rest of an iteration passed over, then the skip of a statement that assigns,
   and last a candidate that discards trained state. The level is the larger of what the family says
   (`GeneratedRepair.gives_up`) and what the code shows (a `continue`, `break` or `return` the edit
   introduces, a name rebound to rows of itself, a layer or optimizer made anew), so a rule's or a
   family's edit that passes over work unlabelled still ranks with its kind;
2. among those that give up as much work, an edit of the code (whose own condition passes the work over
   each time it comes back, counted by the account) before a decision taken at each crash (a skip, a
   retry, an action), which costs a restore each time;
3. the firmer the evidence, the earlier (`GeneratedRepair.evidence`): among the edits that give
   nothing up, an operand traced to its origin or a key read from the live object comes first;
4. the smaller the edit, the earlier: syntax nodes changed, plus two for each new name;
5. the rules' (or the family's) confidence.

The answer holds each repair once and at most `MAX_CANDIDATES`; trials in the training process
then try them in this order (the service cannot: it holds no live state). Confidences are made
non-increasing down the list, so a consumer that sorts by confidence keeps this order.
"""

from __future__ import annotations

import ast
import textwrap

from repairbot import giving_up
from repairbot.bounds import MAX_CODE, MAX_SUGGESTIONS, MAX_TARGET, MAX_WHOLE_DEFS
from repairbot.generate.candidate import (
    CUTS_ROWS,
    CUTS_SEQUENCES,
    DISCARDS_STATE,
    DROPS_ELEMENTS,
    IGNORES_UNLABELED,
    INTRODUCES_JUMP,
    PASSES_ITEM,
    REPLACES_DATA,
    REPLACES_NONFINITE,
    ROUNDS_DOWN,
    SKIPS_ITERATION,
    SKIPS_REPORT,
    SKIPS_STATEMENT,
    GeneratedRepair,
    measure,
)
from repairbot.generate.view import FunctionSite
from repairbot.protocol import Suggestion
from repairbot.signs import parse, wait_code

MAX_CANDIDATES = MAX_SUGGESTIONS
_WAIT_CODE_START = wait_code(0).splitlines()[0]
"""How a wait's code (`signs.wait_code`) starts: it binds no other name."""
LEVELS = {"": giving_up.NOTHING, SKIPS_REPORT: giving_up.REPORT, DROPS_ELEMENTS: giving_up.ROWS,
          CUTS_ROWS: giving_up.ROWS, IGNORES_UNLABELED: giving_up.ROWS, CUTS_SEQUENCES: giving_up.ROWS, REPLACES_DATA: giving_up.ROWS,
          REPLACES_NONFINITE: giving_up.ROWS, ROUNDS_DOWN: giving_up.ROWS, PASSES_ITEM: giving_up.ITERATION,
          SKIPS_ITERATION: giving_up.ITERATION, INTRODUCES_JUMP: giving_up.ITERATION,
          SKIPS_STATEMENT: giving_up.STATEMENT, DISCARDS_STATE: giving_up.STATE}
"""The level (`repairbot.giving_up`) of each thing a family says its candidate gives up."""
_SAID = {giving_up.ROWS: CUTS_ROWS, giving_up.ITERATION: INTRODUCES_JUMP, giving_up.STATEMENT: SKIPS_STATEMENT,
         giving_up.STATE: DISCARDS_STATE}
"""What a candidate gives up, said for the level its code shows when its family said less."""


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
        candidate.gives_up = _gives_up(candidate, sources)
        measured.append(measure(candidate, sources.get(candidate.target if candidate.kind != "action" else "-"), known))
    identities = [(c.kind, _canonical(c.code), c.target) for c in measured]
    _most_given_up(measured, [_same_effect(c, identity) for c, identity in zip(measured, identities)])
    order = sorted(range(len(measured)), key=lambda i: _key(measured[i]))
    kept: list[GeneratedRepair] = []
    seen: set[tuple[str, str, str | None]] = set()
    whole_defs = 0
    for index in order:
        candidate, identity = measured[index], identities[index]
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


def _key(candidate: GeneratedRepair) -> tuple[int, bool, int, int, float]:
    level = LEVELS.get(candidate.gives_up, giving_up.STATE)
    return (
        level,
        level > giving_up.NOTHING and candidate.kind not in ("surgery", "patch_function"),
        -candidate.evidence,
        candidate.cost + 2 * candidate.new_names,
        -(candidate.confidence if candidate.confidence is not None else 0.45 + 0.2 * candidate.evidence),
    )


def _most_given_up(candidates: list[GeneratedRepair], identities: list[tuple[str, str, str | None]]) -> None:
    """The same repair proposed twice gives up the most either proposer says: a family that read the live
    values (a count rounded down past a remainder) knows what a rule's identical edit does not."""
    most: dict[tuple[str, str, str | None], str] = {}
    for candidate, identity in zip(candidates, identities):
        known = most.get(identity)
        if known is None or LEVELS.get(candidate.gives_up, giving_up.STATE) > LEVELS.get(known, giving_up.STATE):
            most[identity] = candidate.gives_up
    for candidate, identity in zip(candidates, identities):
        candidate.gives_up = most[identity]


def _same_effect(candidate: GeneratedRepair, identity: tuple[str, str, str | None]) -> tuple[str, str, str | None]:
    """The repair `candidate` has the effect of: an action that only waits (`signs.wait_code`) resumes at the
    faulty statement, so it is the retry after a wait and gives up what the retry does (at a `for` header,
    the item the iterator could not make)."""
    if candidate.kind == "action" and candidate.code.startswith(_WAIT_CODE_START) and len(candidate.code.splitlines()) == 3:
        return ("retry", _canonical(""), None)
    return identity


def _gives_up(candidate: GeneratedRepair, sources: dict[str | None, str]) -> str:
    """What a candidate loses: what its family says, or more where its code shows more (a jump or a filter it
    introduces, a layer or an optimizer it makes anew). A kind without code is what its family says it is
    (the skip of a statement that only reports), else what its kind is."""
    said = candidate.gives_up
    if said and candidate.kind in ("retry", "skip", "skip_iteration"):
        return said
    old = sources.get(candidate.target) if candidate.kind != "action" else None
    level = giving_up.of_code(candidate.kind, candidate.code, old)
    if level <= LEVELS.get(said, giving_up.STATE):
        return said
    return SKIPS_ITERATION if candidate.kind == "skip_iteration" else _SAID[level]


def _canonical(code: str) -> str:
    """Code compared by its syntax tree, so layout does not make two repairs differ."""
    tree = parse(textwrap.dedent(code)) if code else None
    return ast.dump(tree) if tree is not None else code
