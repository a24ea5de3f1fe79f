"""Functions vaccinated in a `__main__` script and in an IPython-style cell."""

from __future__ import annotations

import linecache
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import daifu

SCRIPT = textwrap.dedent(
    """
    import daifu

    @DECORATOR
    def main():
        values = []
        for i in range(4):
            values.append(12 // (i - 2))
        return values

    daifu.set_policy(lambda crash: daifu.Skip())
    print("result", main())
    print("globals", sorted(k for k in globals() if not k.startswith("__")))
    """
)


@pytest.mark.parametrize(
    ("decorator", "names"),
    [
        ("daifu.transform", ["daifu", "main"]),  # ordinary locals: nothing added to the module
        ("daifu.transform(globals())", ["daifu", "i", "main", "values"]),  # the prototype's scope model
    ],
)
def test_function_in_a_main_script(tmp_path: Path, decorator: str, names: list[str]) -> None:
    script = tmp_path / "train_script.py"
    script.write_text(SCRIPT.replace("DECORATOR", decorator))
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": str(root)}
    )
    assert done.returncode == 0, done.stderr
    assert "result [-6, -12, 12]" in done.stdout
    assert f"globals {names}" in done.stdout


def test_function_defined_in_an_ipython_cell(decide) -> None:
    """IPython registers each cell's source in `linecache` under a name like this one."""
    filename = "<ipython-input-7-0123456789ab>"
    cell = "def cell_fn(n):\n    total = 0\n    for i in range(n):\n        total += 10 // (i - 1)\n    return total\n"
    linecache.cache[filename] = (len(cell), None, cell.splitlines(True), filename)
    namespace: dict = {}
    exec(compile(cell, filename, "exec"), namespace)
    seen = decide(daifu.Skip())
    vaccinated = daifu.transform(namespace["cell_fn"])
    assert vaccinated(3) == -10 + 10
    assert seen[0].filename == filename and seen[0].lineno == 4
