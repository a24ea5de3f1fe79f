"""A vaccinated function defined in a notebook cell, run by a real Jupyter kernel (nbclient + ipykernel).

The prototype's demo is a notebook: a function defined in a cell must be vaccinated from the cell's
own source, crash, be repaired by a policy and resume where it crashed, with the kernel's state
kept. With no terminal (a kernel has none), the `(DaiFu)` console is not opened: the crash raises
in the cell, and DaiFu says once, on stderr, why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from jupyter_client.manager import KernelManager  # noqa: E402 - nbclient's own dependency, there when it is

pytestmark = pytest.mark.slow

DEFINE = """\
import daifu

visited = []

@daifu.transform
def add_all(items):
    total = 0
    for item in items:
        visited.append(item)
        total = total + item
    return total
"""

REPAIR = """\
crashes = []

def policy(crash):
    crashes.append((crash.function_name, crash.lineno, crash.statement, type(crash.exception).__name__))
    return daifu.Surgery(crash.source.replace("total + item", "total + int(item)"))

daifu.set_policy(policy)
print("result", add_all([1, "2", 3]))
print("visited", visited)
print("crashes", crashes)
"""

NO_TERMINAL = """\
daifu.set_policy(None)
add_all([None])
"""


def run_notebook(tmp_path: Path, *sources: str) -> list[Any]:
    """Execute one notebook of `sources` in a fresh kernel; the executed cells."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    # The kernel's channels are Unix sockets in `tmp_path`: no TCP ports picked, freed, then raced for
    # by the tests running beside this one.
    kernel = KernelManager(kernel_name="python3", transport="ipc", ip=str(tmp_path / "kernel"))
    client = nbclient.NotebookClient(
        notebook,
        km=kernel,
        timeout=120,
        allow_errors=True,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    return list(notebook.cells)


def text_of(cell: Any, stream: str) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream" and o.name == stream)


def error_of(cell: Any) -> Any:
    return next((o for o in cell.outputs if o.output_type == "error"), None)


def test_a_cell_function_crashes_is_repaired_by_a_policy_and_resumes_then_without_a_policy_raises(
    tmp_path: Path,
) -> None:
    define, repair, declined, again = run_notebook(tmp_path, DEFINE, REPAIR, NO_TERMINAL, NO_TERMINAL)
    assert error_of(define) is None, define.outputs
    assert error_of(repair) is None, repair.outputs
    printed = text_of(repair, "stdout")
    assert "result 6\n" in printed
    assert "visited [1, '2', 3]\n" in printed  # resumed at the faulty statement: nothing ran twice
    assert "crashes [('add_all', 10, 'total = total + item', 'TypeError')]" in printed  # the cell's own lines
    for cell in (declined, again):
        error = error_of(cell)
        assert error is not None and error.ename == "TypeError"
        assert "int() argument must be" in error.evalue  # the surgery stays: the new source raised
    said = text_of(declined, "stderr") + text_of(again, "stderr")
    assert said.count("DaiFu: TypeError in add_all") == 1, said
    assert "no person is at a terminal to open the (DaiFu) console" in said
    assert 'daifu.configure(mode="automatic", approve="auto")' in said
