"""Candidate repairs generated from the crash itself, for trials to choose from.

The message rules (`repairbot.rules`) know fixes for messages they were written for. This package
does what a person with a debugger does with any message: it reads the faulty statement as a syntax
tree, the facts of the live values it uses (shapes, dtypes, devices, types, paths), the statements
a line up that computed them, and the loop around it, and proposes the small, typed edits those
facts allow — each a whole surgery (or an action, or a control decision). Nothing here knows
whether an edit is right: the training process tries each in a sandboxed copy of the run, in rank
order, and applies the first that completes healthy (`daifu.decide.automatic`).

One module per family of edits, each with `propose(view)`:

- `origin`: the edit where the bad value was made — the report names the wrong operand
  (`CrashReport.operands`), the function's def-use chains (`trace`) lead to the statement that made
  it: a cast there, `- 1` on labels numbered from 1, `//`, a size from the data;
- `numbers`: a float where an int belongs, an int where a size tuple does (PyTorch's argument parser
  says which argument), `//` a line up;
- `dtypes`: casts to the dtype the other operand, the module or the loss needs;
- `shapes`: edits derived from the actual shapes (flatten, unsqueeze, squeeze, transpose, reshape,
  `view` -> `reshape`, the other tensor of a pair cut to match);
- `state_keys`: a state dict saved from (or for) a wrapper such as DataParallel or `torch.compile`, its keys
  renamed as they are loaded where one prefix maps the unexpected keys exactly onto the missing ones;
- `unread`: a value the function made from the faulty statement's operand and never used, read in its
  place (`shift_logits` where the statement reads `logits`);
- `structure`: a tuple where a tensor belongs (`[k]`), a module where its parameters belong, a list of
  dicts indexed by a key;
- `graph`: autograd's graph — state carried across iterations detached, `.detach()`/`.cpu()` before NumPy, a
  tensor autograd saved and then changed in place copied (`.clone()`) where it is made, a value made before an
  optimizer's step and read after it made again where it is read;
- `grad_mode`: gradient tracking left off (the report's `grad_enabled`) when `backward()` finds no graph:
  turned on before the iteration's forward pass, which is made again;
- `leaves`: an in-place change of a leaf that requires grad (`w.clamp_`, `w -= lr * w.grad`) made in
  `torch.no_grad()` (or on `.data`);
- `logs`: a NaN or Inf made by `log` of a tensor holding zeros (an entropy of a sharpened softmax): the
  log of the values clamped to the smallest positive number of their dtype, where they were made;
- `lookups`: from the live object a failed lookup looked in (the report's `lookups`): the nearest key,
  attribute or name holding the kind of value the place needs, `setdefault`/`.get` for a missing entry of
  a mapping that keeps the run's accounts, an index one past the end of a list of settings clamped, a
  reported quotient by zero guarded;
- `elements`: `.item()` on many elements (`.sum()` of a comparison, `.mean()` of a per-sample value),
  `None` placeholders left out of the tensors `torch.cat` joins;
- `constraints`: a distribution's argument mapped into its constraint (`softmax` for a simplex, `logits=`);
- `accumulate`: out of memory in a training step — its forward, loss and backward on micro-batches, the
  gradients accumulated, one optimizer step;
- `memory`: out of memory — the faulty call re-run on chunks of its batch;
- `inclusive_draw`: an index drawn by Python's `random.randint(0, len(items))`, whose upper bound is
  inclusive, lowered by one to the last position;
- `ragged`: a batch made from a list whose samples differ in shape — the odd samples left out of the list
  (or, integer sequences longer than the rest, cut to their length);
- `finite_rows`: rows holding NaN or Inf left out of the batch just after the statement that made it
  (a def-use chain from the faulty statement back to the first tensor of the iteration holding them);
- `small_batch`: a batch of one row too few for the statement passed over where it is made (`if len(idx)
  <= 1: continue`), in every later pass too;
- `unlabeled`: a classification target holding -1 beside every class, read as "no label": the loss's
  `ignore_index=-1`;
- `control`: skip the iteration for bad data, retry (after growing waits) for transient faults,
  make the missing folder of a write;
- `site_control`: passing over chosen by what the faulty statement is, whatever the message: the next
  item of a loader that could not make one, the skip of a statement that only reports, the skip of an
  iteration whose data the statement fails on (each refused by a trial that sees it fire again).

`generate(report)` returns the candidates; `repairbot.generate.rank.ranked` orders them with the
rules' suggestions: first by what each gives up (`repairbot.giving_up`: a changed value, then the skip of
a statement that only reports, rows of a batch, an iteration, the skip of a statement that assigns,
trained state — the larger of what its family says and what its code shows), then an edit before a
decision taken at each crash among those that give up as much, then by evidence (an operand traced to
its origin, a key read from the live object), then by the size of the edit. The training process orders
whatever it is answered by the same levels, and where a trial measured what a repair gave up, by that.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

from repairbot.generate import (
    accumulate,
    constraints,
    control,
    dtypes,
    elements,
    finite_rows,
    grad_mode,
    graph,
    inclusive_draw,
    leaves,
    logs,
    lookups,
    memory,
    numbers,
    origin,
    ragged,
    shapes,
    site_control,
    small_batch,
    state_keys,
    structure,
    unlabeled,
    unread,
)
from repairbot.generate.candidate import GeneratedRepair
from repairbot.generate.view import FunctionSite, View, sites
from repairbot.protocol import CrashReport

PER_FAMILY = 8
"""Candidates one family may propose at one site: each costs a parse, and trials are bounded anyway."""

Family = Callable[[View], Iterator[GeneratedRepair | None]]
FAMILIES: list[tuple[Family, str]] = [
    (origin.propose, "tensor_mismatch"),
    (numbers.propose, "api_misuse"),
    (structure.propose, "api_misuse"),
    (state_keys.propose, "api_misuse"),
    (dtypes.propose, "tensor_mismatch"),
    (shapes.propose, "tensor_mismatch"),
    (unread.propose, "tensor_mismatch"),
    (graph.propose, "api_misuse"),
    (grad_mode.propose, "api_misuse"),
    (leaves.propose, "api_misuse"),
    (logs.propose, "exceptional_data"),
    (lookups.propose, "api_misuse"),
    (inclusive_draw.propose, "api_misuse"),
    (elements.propose, "api_misuse"),
    (constraints.propose, "api_misuse"),
    (accumulate.propose, "out_of_memory"),
    (memory.propose, "out_of_memory"),
    (ragged.propose, "exceptional_data"),
    (finite_rows.propose, "exceptional_data"),
    (small_batch.propose, "exceptional_data"),
    (unlabeled.propose, "exceptional_data"),
    (control.propose, "exceptional_data"),
    (site_control.propose, "exceptional_data"),
]
CATEGORIES = {family.__module__.rsplit(".", 1)[-1]: category for family, category in FAMILIES}


def generate(report: CrashReport) -> tuple[list[GeneratedRepair], list[FunctionSite]]:
    """The candidates generated for `report` (unranked), and the sites they edit."""
    found: list[GeneratedRepair] = []
    places = sites(report)
    for site in places:
        view = View(report, site)
        for family, _ in FAMILIES:
            try:
                proposed = [c for c in itertools.islice(family(view), 4 * PER_FAMILY) if c is not None]
            except (RecursionError, ValueError, IndexError, KeyError, TypeError, AttributeError):
                continue  # a family that cannot read this crash proposes nothing; the others still do
            found += proposed[:PER_FAMILY]
    return found, places
