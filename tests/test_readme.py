"""The README says what the project does: its two commands (CI runs the test one verbatim), its extras, its version."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    """The commands of the README's "Two commands" section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", section)


def test_readme_has_exactly_the_two_commands_and_ci_runs_the_test_one() -> None:
    demo, tests = readme_commands()
    assert demo == 'python3 -m pip install "torch==2.13.0" -e ".[all]" && python3 -m daifu demo'
    assert tests == 'python3 -m pip install "torch==2.13.0" -e ".[test]" && python3 -m pytest'
    assert tests in (ROOT / ".ci" / "run").read_text()


def project() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 and later
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]  # type: ignore[no-any-return]


def test_only_loguru_is_required_and_nothing_pulls_torch() -> None:
    # loguru is the prototype's `daifu.logger`; DaiFu uses the PyTorch the program has
    assert project()["dependencies"] == ["loguru>=0.7"]
    extras = project()["optional-dependencies"]
    assert not [r for requirements in extras.values() for r in requirements if r.lower().startswith("torch")]


def test_every_extra_but_the_benchmarks_is_in_the_readmes_table() -> None:
    text = (ROOT / "README.md").read_text()
    assert [name for name in project()["optional-dependencies"] if f"`daifu[{name}]`" not in text] == ["bench"]


def test_the_command_says_the_projects_version() -> None:
    done = subprocess.run([sys.executable, "-m", "daifu", "--version"], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == f"daifu {project()['version']}"
