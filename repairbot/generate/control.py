"""Control decisions: pass over bad data, wait out a transient fault, make a missing folder.

- Bad data: NaN or Inf in this iteration's data that the statement reads (a tensor's or a NumPy array's
  facts say so) is first replaced by 0 where the statement reads it (`x.nan_to_num(0.0, 0.0, 0.0)`,
  `numpy.nan_to_num`), unless a whole record holds no finite value: the iteration goes on with the rest
  of its data, and the candidate says what it changed. Then: a batch holding NaN or Inf (the statement's tensors say so, or the message does), or an
  index out of range in this iteration's integer data (a token id past the embedding's size, a label
  past the classes), is passed over with `skip_iteration` — the rest of this iteration — when the
  statement is in a loop. It skips work, and says so; it is ranked after every edit.
- Transient faults (I/O errors, lost connections, collective timeouts, a device busy or its memory
  held by another process): `retry` at once, then retries after waits of growing length. Each wait is
  tried in a sandboxed copy first, so the run waits only as long as the fault lasts.
- A write into a folder that does not exist ("Parent directory runs/x does not exist", or "No such
  file or directory" from a statement that saves or opens for writing): make the folder, then run the
  statement again.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterator

from repairbot.generate import edits, make
from repairbot.generate.candidate import (
    DROPS_ELEMENTS,
    REPLACES_DATA,
    REPLACES_NONFINITE,
    SKIPS_ITERATION,
    GeneratedRepair,
)
from repairbot.generate.view import View
from repairbot.signs import BUSY, MAX_RETRIES, PERMANENT_OS, TRANSIENT, TRANSIENT_TYPES, others_hold_more, wait_code

WAITS = (0.5, 2.0, 8.0, 30.0)
"""Seconds waited before a retry, shortest first; a trial of each says whether the fault has passed."""
_NONFINITE = re.compile(r"\bnan\b|\binf\b|non-?finite|not finite|isfinite|isnan", re.IGNORECASE)
_OUT_OF_RANGE = re.compile(r"index out of range|out of bounds|index -?\d+ is out of|device-side assert", re.IGNORECASE)
_PAST = re.compile(r"\b(?:Target|index) (\d+) is out of bounds(?: for dimension \d+ with size (\d+))?", re.IGNORECASE)
_WRITES = re.compile(r"(^|_)(save|savez|savetxt|savefig|dump|write|write_text|write_bytes|to_csv|to_json|imwrite)"
                     r"($|_)|^save_")


def propose(view: View) -> Iterator[GeneratedRepair | None]:
    yield from _transient(view)
    if view.statement is None:
        return
    yield from _bad_data(view)
    yield from _missing_folder(view)


def _bad_data(view: View) -> Iterator[GeneratedRepair | None]:
    if not view.in_loop():
        return
    poisoned = [n for n in view.reads if view.facts(n).get("nan") or view.facts(n).get("inf")]
    yield from _zeroed(view, [n for n in poisoned if view.assigned_in_iteration(n)])
    evidence = -1
    if poisoned:
        evidence = 2
    elif view.says(_NONFINITE) and not view.says(r"Expected parameter \w+ .* to satisfy the constraint (Simplex|"
                                                 r"GreaterThan|UnitInterval)"):
        evidence = 1
    if view.says(_OUT_OF_RANGE) and view.exception_types & {"IndexError", "RuntimeError", "ValueError"}:
        data = [n for n in view.reads if view.is_tensor(n) and view.assigned_in_iteration(n)
                and str(view.facts(n).get("dtype", "")).startswith(("int", "uint"))]
        if data:
            evidence = max(evidence, 2 if _past_a_table(view, data) else 1)
            yield from _replace_ids(view)
            yield from _dropped_rows(view, data)
    if evidence >= 0:
        where = f" (`{'`, `'.join(poisoned)}` hold NaN or Inf)" if poisoned else ""
        yield GeneratedRepair("skip_iteration", f"This iteration's data cannot be used{where}: pass over the rest "
                              "of the iteration and go on with the next batch.", "exceptional_data", evidence,
                              gives_up=SKIPS_ITERATION)


def _zeroed(view: View, names: list[str]) -> Iterator[GeneratedRepair | None]:
    """NaN and Inf in this iteration's tensors or NumPy arrays `names` replaced by 0 where the statement reads them:
    missing values among a record's others. Not where a whole record holds no finite value (its facts'
    `nonfinite_rows`): zeros in its place would be a made-up record, trained on with its label each time it
    is loaded; those rows are left out instead (`finite_rows`), or the batch passed over."""
    for name in names:
        if view.facts(name).get("nonfinite_rows"):
            continue
        if view.is_tensor(name):
            yield make.changed(view, make.wrap_reads(view, name, "{}.nan_to_num(0.0, 0.0, 0.0)"),
                               f"`{name}` holds NaN or Inf: read it with those values set to 0.", "exceptional_data",
                               1, gives_up=REPLACES_NONFINITE)
        elif view.type_of(name) == "numpy.ndarray" and view.statement is not None:
            code = make.wrap_reads(view, name, "numpy.nan_to_num({}, nan=0.0, posinf=0.0, neginf=0.0)")
            if not view.uses_module("numpy"):
                code = edits.with_line_before(view, code, view.statement, "import numpy")
            yield make.changed(view, code, f"The NumPy array `{name}` holds NaN or Inf: read it with those values "
                               "set to 0.", "exceptional_data", 1, gives_up=REPLACES_NONFINITE)


def _dropped_rows(view: View, data: list[str]) -> Iterator[GeneratedRepair | None]:
    """The rows whose id is past the bound the message gives ("Target 10 is out of bounds", "index 12 is out of
    bounds for dimension 0 with size 10") left out of this iteration's tensors the statement reads.

    The bound kept is the message's size, or else the id it names: every valid id is below it (the id was
    refused), so no valid row is dropped; if other ids are still out of range, the statement fails again in
    the trial. The other tensors of this iteration with as many rows (the inputs) lose the same rows.
    """
    found = view.says(_PAST)
    if found is None or view.statement is None:
        return
    bound = int(found.group(2) or found.group(1))
    ids = [n for n in data if isinstance(view.facts(n).get("max"), int) and view.facts(n)["max"] >= bound
           and view.facts(n).get("shape")]
    if len(ids) != 1:
        return
    rows = view.facts(ids[0])["shape"][0]
    kept = [n for n in view.reads if view.is_tensor(n) and view.assigned_in_iteration(n)
            and (view.facts(n).get("shape") or [None])[0] == rows]
    keep = view.fresh("_daifu_keep")
    lines = f"{keep} = {ids[0]} < {bound}\n{', '.join(kept)} = {', '.join(f'{n}[{keep}]' for n in kept)}"
    yield make.changed(view, edits.insert_before(view, view.statement, lines),
                       f"`{ids[0]}` holds ids past {bound - 1}: leave those rows out of "
                       f"{', '.join(f'`{n}`' for n in kept)}, then run the statement again.", "exceptional_data", 2,
                       gives_up=DROPS_ELEMENTS)


def _table_sizes(view: View) -> list[int]:
    """The number of rows of each embedding the live modules hold."""
    return [int(e[1]) for facts in view.modules().values() for e in facts.get("embeddings") or [] if len(e) > 1]


def _past_a_table(view: View, data: list[str]) -> bool:
    """Whether some integer tensor's largest value is past the size of an embedding the modules hold."""
    return any(isinstance(view.facts(n).get("max"), int) and view.facts(n)["max"] >= size
               for n in data for size in _table_sizes(view))


def _replace_ids(view: View) -> Iterator[GeneratedRepair | None]:
    """Ids past the smallest embedding's rows, in this iteration's integer tensors, set to 0 (then the statement
    runs again): the batch is kept, its few bad ids become the conventional unknown id."""
    sizes = _table_sizes(view)
    if not sizes:
        return
    rows = min(sizes)
    bad = [n for n, v in view.site.variables.items() if v.type == "Tensor" and view.assigned_in_iteration(n)
           and str(v.facts.get("dtype", "")).startswith(("int", "uint")) and isinstance(v.facts.get("max"), int)
           and v.facts["max"] >= rows]
    if bad:
        code = "\n".join(f"{n} = {n}.masked_fill({n} >= {rows}, 0)" for n in bad)
        yield make.action(view, code, f"{', '.join(f'`{n}`' for n in bad)} hold ids past the embedding's {rows} rows: "
                          "set those ids to 0, then run the statement again.", "exceptional_data", 2,
                          gives_up=REPLACES_DATA)


def _transient(view: View) -> Iterator[GeneratedRepair | None]:
    e = view.report.exception
    plain_os = e.type in {"OSError", "IOError"} and not view.exception_types & PERMANENT_OS
    busy = view.says(BUSY) or others_hold_more(view.message)
    if not (view.exception_types & TRANSIENT_TYPES or plain_os or view.says(TRANSIENT) or busy):
        return
    if not view.outermost or len(view.report.tried) >= MAX_RETRIES:
        return
    yield GeneratedRepair("retry", "A transient fault: run the statement again.", "transient", 2, confidence=0.75)
    for index, seconds in enumerate(WAITS):
        wait = make.action(view, wait_code(seconds), f"Wait {seconds:g} s for the fault to pass, then run the "
                           "statement again.", "transient", 2)
        if wait is not None:
            wait.confidence = 0.7 - 0.05 * index  # the shortest wait first: a trial says whether it was enough
        yield wait


def _missing_folder(view: View) -> Iterator[GeneratedRepair | None]:
    found = view.says(r"Parent directory (.+?) does not exist")
    folder = found.group(1).rstrip(".") if found else None
    if folder is None:
        missing = view.says(r"No such file or directory: '([^']+)'")
        if missing and _writes(view):
            folder = os.path.dirname(missing.group(1))
    if folder:
        yield make.action(view, f"import os\nos.makedirs({folder!r}, exist_ok=True)",
                          f"The folder {folder!r} does not exist: make it, then write again.", "path", 2)


def _writes(view: View) -> bool:
    """Whether the faulty statement writes a file: a saving call, or `open` with a writing mode."""
    for call in make.calls(view):
        name = make.name_of(call.func) or ""
        if _WRITES.search(name):
            return True
        if name == "open":
            modes = [a for a in call.args[1:2]] + [k.value for k in call.keywords if k.arg == "mode"]
            if any(isinstance(m, ast.Constant) and isinstance(m.value, str) and set(m.value) & set("wax")
                   for m in modes):
                return True
    return False
