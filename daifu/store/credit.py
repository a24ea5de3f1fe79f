"""Who decided a repair, and who suggested it: two facts of the record, kept apart.

A person who applies the repair bot's suggestion on the approval page decided it; the bot suggested
it. A repair `approve="auto"` applied was decided automatically (verified, unattended) and suggested
by the bot. The record (`repairs.jsonl`) writes both, `decided_by` and `suggested_by`:

- `decided_by`: `person` (at the console, the approval prompt or the approval page: `decided_at`
  says which, `decided_by_person` the name a page gave), `automatic`, `policy`, `registry`, `replay`,
  `broadcast`, `leader rank` (another rank's decision), `default` (nothing decided: the crash raised);
- `suggested_by`: `bot`, `person`, or the decider itself for the others.

Records written before the two were apart carry only `decided_by`, with the source of the decision
(`bot`, `console`): `read` gives every record's pair, old and new alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PERSON = "person"
AUTOMATIC = "automatic"
BOT = "bot"
CONSOLE = "console"


def credit(source: str, extra: Mapping[str, Any], decided: bool) -> tuple[str, str]:
    """`(decided_by, suggested_by)` of a repair the decision source `source` (`DecidedBy`) answered,
    with what its decider noted in `extra` (`decided_at`, `suggested_by`); `decided`: whether a
    decision was taken (else nothing was suggested either)."""
    if source == CONSOLE or extra.get("decided_at"):
        decider = PERSON
    elif source == BOT:
        decider = AUTOMATIC
    else:
        decider = source
    if not decided:
        return decider, ""
    return decider, str(extra.get("suggested_by") or (BOT if source == BOT else decider))


def read(entry: Mapping[str, Any]) -> tuple[str, str]:
    """`(decided_by, suggested_by)` of a recorded repair; of an old record (no `suggested_by`), as its
    source said: `bot` was the bot's suggestion, applied automatically unless a person's name is
    recorded beside it (`decided_by_person`), and `console` a person's own decision."""
    decided_by = str(entry.get("decided_by") or "")
    if "suggested_by" in entry:
        return decided_by, str(entry.get("suggested_by") or "")
    if decided_by == BOT:
        return (PERSON if entry.get("decided_by_person") else AUTOMATIC), BOT
    if decided_by == CONSOLE:
        return PERSON, PERSON
    return decided_by, decided_by
