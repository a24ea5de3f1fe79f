"""Control candidates chosen by what the faulty statement is, whatever its message says.

The same problem gives different messages across PyTorch versions and ops, and a crash nobody wrote a
rule for still happens at a site of a known kind. When no edit of the code fits, the run can often go
on by passing over the little that failed, and what may be passed over depends on the site:

- a `for` header whose iterator object raised (a sample its loader could not make): `skip_iteration`
  there passes over the item that failed, and the loop goes on with the next item of the same
  iterator (not `retry`, which loads a DataLoader's failed batch again: the same bad sample would fail
  the same way). Only when the frame under the header is an iterator object's `__next__`: a generator
  that raised is finished, and going on with its loop would end the loop, passing over everything
  left in it;
- a statement that only reports — a `print`, a logger's, a progress bar's or a metrics board's call —
  and binds nothing: `skip` it; the run loses one line of its log, no trained state;
- a statement in a `for` loop's iteration that reads that iteration's data (a batch the loop made):
  `skip_iteration` passes over the rest of this iteration;
- a statement that writes a whole file (`torch.save`, `numpy.save`, `pickle.dump`, `json.dump`) and binds
  nothing, failed with a runtime or an I/O error that does not say the path is wrong (not found, not
  permitted): `retry` it, at once and after growing waits — a shared file system's momentary failure
  passes, and writing the whole file again is the same write. Nothing is passed over; a trial says
  whether the write now succeeds.

Each gives something up, says what in its explanation, and is ranked after every edit. None is right
by itself: a trial that runs past the interrupted iteration sees whether it fires again on the
following ones (a deterministic fault does, bad data seldom does) and refuses it when what it passes
over grows past the budget (`daifu.core.trial`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from repairbot.generate import make
from repairbot.generate.candidate import PASSES_ITEM, SKIPS_ITERATION, SKIPS_REPORT, GeneratedRepair
from repairbot.generate.control import WAITS
from repairbot.generate.view import View
from repairbot.giving_up import REPORTERS, REPORTING_MODULES
from repairbot.signs import MAX_RETRIES, PERMANENT_OS, wait_code

_CODE_ERRORS = frozenset({"NameError", "UnboundLocalError", "ImportError", "ModuleNotFoundError", "SyntaxError",
                          "IndentationError", "NotImplementedError", "RecursionError"})
"""Exceptions that say the code is wrong whatever the data: passing the data over cannot help."""
_WRITERS = {"torch": {"save"}, "numpy": {"save", "savez", "savez_compressed", "savetxt"},
            "np": {"save", "savez", "savez_compressed", "savetxt"}, "pickle": {"dump"}, "json": {"dump"}}
"""Module functions that write a whole file from their arguments: the same call writes the same file again."""
_WRITE_FAILURES = frozenset({"RuntimeError", "OSError", "IOError"})
"""What a failed write raises (PyTorch's stream writer raises RuntimeError); a `TypeError` or a `ValueError`
says the arguments are wrong, which no retry mends."""


def propose(view: View) -> Iterator[GeneratedRepair | None]:
    if view.statement is None or not view.outermost:
        return
    yield from _next_item(view)
    yield from _write_retried(view)
    yield from _report_skipped(view)
    yield from _batch_passed_over(view)


def _next_item(view: View) -> Iterator[GeneratedRepair | None]:
    """`skip_iteration` at a `for` header whose iterator object raised: the item that failed is passed over,
    the loop goes on with the next one, from the same iterator."""
    if not isinstance(view.statement, (ast.For, ast.AsyncFor)) or view.exception_types & _CODE_ERRORS:
        return
    below = view.report.frames[1:2]
    if not below or below[0].function not in ("__next__", "__anext__"):
        return
    yield GeneratedRepair("skip_iteration", "The loop's iterator could not make its next item (a sample that "
                          "cannot be loaded): pass over that item and go on with the one after it, from the same "
                          "iterator.", "exceptional_data", 1, gives_up=PASSES_ITEM)


def _report_skipped(view: View) -> Iterator[GeneratedRepair | None]:
    """`skip` of a statement that binds nothing and only calls a reporter."""
    statement = view.statement
    if not isinstance(statement, ast.Expr):
        return
    call = statement.value.value if isinstance(statement.value, ast.Await) else statement.value
    if isinstance(call, ast.Call) and _reports(view, call.func):
        yield GeneratedRepair("skip", "The statement only reports (it logs or prints, and assigns nothing): pass it "
                              "over, and training goes on without that line of its log.", "exceptional_data", 1,
                              gives_up=SKIPS_REPORT)


def _write_retried(view: View) -> Iterator[GeneratedRepair | None]:
    """`retry` (at once, then after each wait) of a statement that only writes a whole file (see the module
    docstring)."""
    statement, e = view.statement, view.report.exception
    if not isinstance(statement, ast.Expr) or not isinstance(statement.value, ast.Call):
        return
    func = statement.value.func
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
            and func.attr in _WRITERS.get(func.value.id, ()) and view.uses_module(func.value.id)):
        return
    if e.type not in _WRITE_FAILURES or view.exception_types & PERMANENT_OS or len(view.report.tried) >= MAX_RETRIES:
        return
    writer = f"{func.value.id}.{func.attr}"
    yield GeneratedRepair("retry", f"The statement only writes a file (`{writer}`), and the write failed: write it "
                          "again, as a momentary failure of the file system passes.", "exceptional_data", 1)
    for seconds in WAITS:
        yield make.action(view, wait_code(seconds), f"The write (`{writer}`) failed: wait {seconds:g} s, then write "
                          "the file again.", "exceptional_data", 1)


def _reports(view: View, called: ast.expr) -> bool:
    """Whether `called` is a reporter: the builtin `print`, a reporting module's function, or a method of a
    live value whose class is a reporter's."""
    if isinstance(called, ast.Name):
        return called.id == "print" and "print" not in view.site.variables
    if not isinstance(called, ast.Attribute):
        return False
    receiver = called.value
    while isinstance(receiver, ast.Attribute):
        receiver = receiver.value
    if not isinstance(receiver, ast.Name):
        return False
    if receiver is called.value and receiver.id in REPORTING_MODULES and view.uses_module(receiver.id):
        return True
    if receiver is not called.value:
        return False  # `a.b.write(...)`: what `a.b` is, the report does not say
    kind = view.type_of(receiver.id) or ""
    return kind.startswith(REPORTERS)


def _batch_passed_over(view: View) -> Iterator[GeneratedRepair | None]:
    """`skip_iteration` of a statement in a `for` loop that reads the data of its iteration."""
    loops = view.loops()
    if not loops or not isinstance(loops[0], (ast.For, ast.AsyncFor)) or view.exception_types & _CODE_ERRORS:
        return
    data = [name for name in view.reads if view.assigned_in_iteration(name) and _holds_data(view, name)]
    if data:
        yield GeneratedRepair("skip_iteration", f"The statement fails on this iteration's data "
                              f"({', '.join(f'`{n}`' for n in data[:3])}): pass over the rest of the iteration and go "
                              "on with the next one.", "exceptional_data", 0, gives_up=SKIPS_ITERATION)


def _holds_data(view: View, name: str) -> bool:
    """Whether `name` holds a batch: a tensor, an array, or a container of them (a list of samples)."""
    kind = view.type_of(name) or ""
    return kind in ("Tensor", "numpy.ndarray", "list", "tuple", "dict") or kind.endswith("BatchEncoding")
