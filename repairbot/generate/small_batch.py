"""A batch too small for the statement, passed over where it is made, for this pass and every later one.

A loop that takes batches of a fixed size from data whose length is no multiple of it ends each pass
with a smaller batch; one row is too few for some layers (BatchNorm in training mode computes its
statistics over the batch). Skipping that iteration at the crash only moves the crash to the end of the
next pass. The report's facts say which tensor of this iteration the faulty statement reads has a
single row; following the def-use chain (`repairbot.generate.trace`) to the statement of the iteration
that made it, this family passes over such batches just after it, as `DataLoader(drop_last=True)` would:

    idx = order[first:first + BATCH]
    if len(idx) <= 1:
        continue

It passes over the rest of the iteration where it fires, and says so; the horizon refuses it where it
fires in batch after batch, and the run's budget allows it once per pass over the data, at the same
place in the pass (`daifu.core.account.Budget`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from repairbot.generate import edits, make
from repairbot.generate.candidate import INTRODUCES_JUMP, GeneratedRepair
from repairbot.generate.trace import definition
from repairbot.generate.view import View

FAMILY = "exceptional_data"
_SIZE_ERRORS = frozenset({"ValueError", "RuntimeError"})


def propose(view: View) -> Iterator[GeneratedRepair | None]:
    statement = view.statement
    if not view.outermost or statement is None or not view.in_loop() or not view.exception_types & _SIZE_ERRORS:
        return
    if not view.says(r"\bsize\b|per channel|batch"):
        return
    for name in view.reads:
        shape = view.facts(name).get("shape")
        if not view.is_tensor(name) or not isinstance(shape, list) or not shape or shape[0] != 1 \
                or not view.assigned_in_iteration(name):
            continue
        link = definition(view, name, statement)
        if link is None or not link.reruns or not isinstance(link.statement, ast.Assign):
            continue
        found = view.block(link.statement)
        if found is None or found[1] + 1 >= len(found[0]):
            continue
        following = found[0][found[1] + 1]
        yield make.changed(view, edits.insert_before(view, following, f"if len({name}) <= 1:\n    continue"),
                           f"`{name}` holds one row, too few for the statement (the last batch of a pass over "
                           f"data that is no multiple of the batch size): pass over batches of one row where "
                           f"`{name}` is made, in this pass and every later one.", FAMILY, 2,
                           gives_up=INTRODUCES_JUMP)
        return
