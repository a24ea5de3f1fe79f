"""What automatic mode admits: correct repairs of real crashes, as surgeries and as actions.

Each repair of `tests.admitted_repairs` answers a crash the installed torch or numpy really raises,
in the live context of that crash (`context_for`), as `approve="auto"` checks it: it must be admitted,
and the edited function must run through without the crash. The issue's examples are all here:
`np.median(w.detach().numpy())` where the function already called `np.median`, `.to_dense()` of a
sparse gradient, `history.setdefault("val_acc", []).append(v)`, casts, `//`, `.reshape`, `.flatten(1)`,
a `torch.no_grad()` block, `.clamp`, an `ignore_index` and a mask, and the program's own helper.
"""

from __future__ import annotations

import inspect
import textwrap

import pytest

from tests.extras import BOT

for _package in (*BOT, "numpy"):
    pytest.importorskip(_package)

torch = pytest.importorskip("torch")

from daifu.decide.allowlist import check_safety, check_surgery_safety, context_for
from tests import admitted_repairs
from tests.admitted_repairs import REPAIRS, Repair
from tests.test_allowlist import live_crash


@pytest.mark.parametrize("repair", REPAIRS, ids=lambda r: r.name)
def test_a_correct_repair_of_a_real_crash_is_admitted_as_a_surgery(repair: Repair) -> None:
    crash = live_crash(repair.function, *repair.arguments())
    assert repair.message in str(crash.exception), crash.exception
    fixed = crash.source.replace(repair.old, repair.new, 1)
    assert fixed != crash.source
    verdict = check_surgery_safety(fixed, context_for(crash))
    assert verdict.ok, verdict.reasons
    namespace = dict(vars(admitted_repairs))
    exec(compile(textwrap.dedent(fixed), inspect.getsourcefile(repair.function) or "", "exec"), namespace)
    namespace[repair.function.__name__](*repair.arguments())  # the repair really repairs


ACTIONS = [
    ("a dict entry made on first use", 'history.setdefault("val_acc", []).append(v)'),
    ("float labels cast to long", "y = y.long()"),
    ("a sparse gradient made dense for numpy", "grad = emb.weight.grad.to_dense().numpy()"),
    ("detach before numpy", "typical = np.median(w.detach().numpy())"),
    ("detach before an aliased numpy function", "typical = middle(w.detach().numpy())"),
    ("the program's own helper", "scores = torch.cat([as_tensor_of_floats(v) for v in values])"),
    ("an in-place update under no_grad", "with torch.no_grad():\n    w -= 0.1 * w.grad"),
    ("padding labels masked out", "keep = y != -1\nout, y = out[keep], y[keep]"),
]


@pytest.mark.parametrize(("name", "code"), ACTIONS, ids=[name for name, _ in ACTIONS])
def test_a_correct_action_for_a_real_crash_is_admitted(name: str, code: str) -> None:
    repair = next(r for r in REPAIRS if r.name == name)
    crash = live_crash(repair.function, *repair.arguments())
    verdict = check_safety(code, context_for(crash))
    assert verdict.ok, verdict.reasons


def test_messages_name_the_files_lines_not_the_functions() -> None:
    """Issue 25.8: a reason read `line 4: calls the method ...` where the file's line was 56; a person
    or a model reading it must find the line in the file."""
    repair = next(r for r in REPAIRS if r.name == "a sparse gradient made dense for numpy")
    crash = live_crash(repair.function, *repair.arguments())
    lines, first = inspect.getsourcelines(repair.function)
    line = first + next(i for i, text in enumerate(lines) if ".grad.numpy()" in text)
    assert line > 40  # deep in its file: a line counted from the def would not be the file's
    context = context_for(crash)
    bad = crash.source.replace(".grad.numpy()", ".grad.to_dense().numpy().tofile('x')")
    assert check_surgery_safety(bad, context).reasons == (
        f"line {line}: calls the method `.tofile()`, which is not on the allowlist",
    )
    broken = crash.source.replace(".grad.numpy()", ".grad.numpy(")
    assert check_surgery_safety(broken, context).reasons[0].endswith(f"(line {line})")
    assert check_safety("x = (", context).reasons == ("the action does not parse: '(' was never closed "
                                                        "(line 1 of the action)",)
