"""Out of memory: the faulty call re-run on chunks of its batch.

Halving a `batch_size` variable does nothing to a loader already iterating, and cutting one tensor of
a pair breaks the next statement (issue 13, point 4). What does change what runs is the call that ran
out of memory, made on slices of its input's first dimension and put back together: the statement's
result is the same, each call needs a fraction of the memory, and every later iteration runs the
chunked call too. Three chunk sizes are proposed (a half, a quarter, an eighth of the batch as it is
now); a trial that still runs out of memory sends the next one.

- `model(x)` inside an expression: `torch.cat([model(chunk) for chunk in x.split(k)])`;
- `a, b = model(x)` (a module returning several tensors): each output concatenated,
  `a, b = [torch.cat(p) for p in zip(*[model(chunk) for chunk in x.split(k)])]`;
- `out, state = model(x, state)` (a recurrent call whose state is an argument and a result): the
  chunks run in order, each starting from the state the previous one left — exactly what one call on
  the whole sequence computes, for a recurrent model over its first (time) dimension.

Memory held by another process is not this program's: `control` waits for it instead. A chunked
forward pass keeps the same autograd graph, so in training it bounds the memory of the forward pass's
peak, not of what backward keeps; a trial on the real device is what says whether it is enough.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from repairbot.generate import edits, infer, make
from repairbot.generate.candidate import GeneratedRepair
from repairbot.generate.view import View
from repairbot.signs import BUSY, OOM, others_hold_more

FAMILY = "memory"
CHUNKS = (2, 4, 8)


def propose(view: View) -> Iterator[GeneratedRepair | None]:
    statement = view.statement
    if statement is None or not ("OutOfMemoryError" in view.exception_types or view.says(OOM)):
        return
    if view.says(BUSY) or others_hold_more(view.message) or not (view.uses_module("torch")
                                                                  or "torch" not in view.source_names):
        return
    for call in make.module_calls(view):
        if not call.args or any(isinstance(a, ast.Starred) for a in call.args):
            continue
        shape = infer.shape(view, call.args[0])
        if not shape or shape[0] < 2:
            continue
        sizes = list(dict.fromkeys(max(1, -(-shape[0] // parts)) for parts in CHUNKS if shape[0] // parts >= 1))
        for size in sizes:
            yield _chunked(view, statement, call, size, shape[0])


def _chunked(view: View, statement: ast.stmt, call: ast.Call, size: int, total: int) -> GeneratedRepair | None:
    """`_chunks`, with `import torch` before the statement when the function does not reach torch itself."""
    found = _chunks(view, statement, call, size, total)
    if found is None or view.uses_module("torch"):
        return found
    found.code = edits.with_line_before(view, found.code, statement, "import torch") or ""
    return found if found.code else None


def _chunks(view: View, statement: ast.stmt, call: ast.Call, size: int, total: int) -> GeneratedRepair | None:
    """The statement with `call` made on chunks of `size` rows of its first argument.

    No comprehension in the new code reads a local of the function (only its own variable and the
    iterable it starts from): a closure over a local would make that local a cell of the new version.
    """
    chunk, parts = view.fresh("chunk"), view.fresh("parts")
    one = edits.text_with(view, call, [(call.args[0], chunk)])
    callee, batch = edits.text(view, call.func), edits.atom(view, call.args[0])
    why = (f"`{edits.text(view, call)}` ran out of memory on {total} rows; run it on chunks of {size} rows and "
           "put the results together")
    target = statement.targets[0] if isinstance(statement, ast.Assign) and len(statement.targets) == 1 else None
    whole = isinstance(statement, ast.Assign) and statement.value is call
    names = [t.id for t in target.elts if isinstance(t, ast.Name)] if isinstance(target, ast.Tuple) else []
    passed = {n.id for a in call.args[1:] for n in ast.walk(a) if isinstance(n, ast.Name)}
    state = [n for n in names if n in passed]
    if whole and isinstance(target, ast.Tuple) and len(names) == len(target.elts) == 2 and state == names[1:]:
        part = view.fresh("part")
        text = (f"{parts} = []\nfor {chunk} in {batch}.split({size}):\n"
                f"    {part}, {state[0]} = {one}\n    {parts}.append({part})\n"
                f"{names[0]} = torch.cat({parts})")
        return make.changed(view, edits.replace_statement(view, statement, text),
                            f"{why}, each chunk starting from the state `{state[0]}` the previous one left.", FAMILY, 2)
    if state:
        return None
    if len(call.args) == 1 and not call.keywords:
        if names:
            outputs = view.fresh("outputs")
            value = f"[torch.cat({outputs}) for {outputs} in zip(*map({callee}, {batch}.split({size})))]"
            return make.changed(view, edits.replace(view, [(call, value)]) if whole else None,
                                f"{why} (each of its outputs).", FAMILY, 2)
        value = f"torch.cat(tuple(map({callee}, {batch}.split({size}))))"
        return make.changed(view, edits.replace(view, [(call, value)]), f"{why}.", FAMILY, 2)
    if whole and isinstance(target, ast.Name):
        text = (f"{parts} = []\nfor {chunk} in {batch}.split({size}):\n    {parts}.append({one})\n"
                f"{target.id} = torch.cat({parts})")
        return make.changed(view, edits.replace_statement(view, statement, text), f"{why}.", FAMILY, 2)
    return None
