"""The README's two commands are the ones that work: CI runs the test command verbatim."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    """The commands of the README's "Two commands" section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", section)


def test_readme_has_exactly_the_two_commands_and_ci_runs_the_test_one() -> None:
    demo, tests = readme_commands()
    assert demo.endswith("python3 -m daifu demo") and "-e ." in demo
    assert tests.endswith("python3 -m pytest") and '".[test]"' in tests
    assert tests in (ROOT / ".ci" / "run").read_text()
