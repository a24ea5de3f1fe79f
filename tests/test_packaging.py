"""The wheel, built and installed as a user installs it, away from the source tree.

The wheel is built from a copy of what it is made of, installed with `--no-deps` into a fresh
virtual environment outside the tree (which sees this environment's packages, pydantic among them,
through a `.pth` file, so nothing is downloaded), and used from a folder outside the tree with no
`PYTHONPATH`: every module of the source tree is in it, the prompt templates of the top-level
`prompts/` folder travel with it and are rendered from the installed package for a real crash,
without PyTorch being imported, and `daifu --version` names the version.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("pydantic")  # the repair bot's wire models, which the prompts are rendered from
pytest.importorskip("setuptools")  # the build backend, used as installed (no download)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
MADE_OF = ("daifu", "repairbot", "prompts", "pyproject.toml", "README.md")

RENDER = """
import json, os, sys
from pathlib import Path

import daifu
import repairbot
from daifu.report.build import build_report
from repairbot import prompts

rendered = {}

def policy(crash):
    values = prompts.values(build_report(crash))
    for template in sorted(prompts.prompts_dir().glob("*.txt")):
        rendered[template.stem] = prompts.render(template.stem, values)
    return daifu.Skip()

@daifu.transform
def add_all(items):
    total = 0
    for item in items:
        total = total + item
    return total

daifu.set_policy(policy)
add_all([1, "2", 3])
used = str(prompts.prompts_dir())
os.environ["DAIFU_PROMPTS_DIR"] = sys.argv[1]
print(json.dumps({
    "daifu": daifu.__file__,
    "repairbot": repairbot.__file__,
    "prompts_dir": used,
    "rendered": rendered,
    "overridden": prompts.read("system"),
    "version": daifu.__version__,
    "torch_imported": "torch" in sys.modules,
}))
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the wheel, the virtual environment it is installed in)."""
    source = tmp_path_factory.mktemp("source")
    for name in MADE_OF:
        origin = ROOT / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(origin, source / name)
    wheels = tmp_path_factory.mktemp("wheels")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(wheels), str(source)])
    [wheel] = wheels.glob("daifu-*.whl")
    venv = tmp_path_factory.mktemp("env") / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = str(venv / "bin" / "python")
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    # This environment's packages (pydantic...) after the venv's own: plain path lines, so the .pth
    # files there (an editable install of the source tree) are not processed.
    outer = [*site.getsitepackages(), site.getusersitepackages()]
    (Path(purelib) / "outer.pth").write_text("".join(f"{path}\n" for path in outer))
    run([*pip, "--python", python, "install", "--no-deps", "--no-index", str(wheel)])
    return wheel, venv


def run(command: list[str], **options: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=outside_env(), **options)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done  # type: ignore[no-any-return]


def outside_env() -> dict[str, str]:
    """The environment of a user's shell: no PYTHONPATH to the tree, no DaiFu settings."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("DAIFU_")}


def test_the_wheel_holds_every_module_and_every_prompt_template(installed: tuple[Path, Path]) -> None:
    wheel, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {str(p.relative_to(ROOT)) for package in ("daifu", "repairbot") for p in (ROOT / package).rglob("*.py")}
    assert modules - names == set()
    templates = {f"repairbot/templates/{p.name}" for p in (ROOT / "prompts").glob("*.txt")}
    assert templates and templates <= names
    assert "daifu/py.typed" in names


def test_the_installed_package_renders_every_prompt_template_outside_the_tree(
    installed: tuple[Path, Path], tmp_path: Path
) -> None:
    _, venv = installed
    script = tmp_path / "render.py"
    script.write_text(textwrap.dedent(RENDER))
    own = tmp_path / "own_prompts"
    own.mkdir()
    (own / "system.txt").write_text("my own system prompt\n")
    done = run([str(venv / "bin" / "python"), str(script), str(own)], cwd=tmp_path)
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["daifu"].startswith(str(venv)) and found["repairbot"].startswith(str(venv))
    assert sorted(found["rendered"]) == sorted(p.stem for p in (ROOT / "prompts").glob("*.txt"))
    assert found["prompts_dir"] == str(Path(found["repairbot"]).parent / "templates")
    repair = found["rendered"]["repair"]
    assert "total = total + item" in repair and "TypeError" in repair and "$exception" not in repair
    assert found["overridden"] == "my own system prompt\n"  # DAIFU_PROMPTS_DIR still wins
    assert found["version"] == "0.1.0" and found["torch_imported"] is False


def test_the_installed_command_says_its_version(installed: tuple[Path, Path], tmp_path: Path) -> None:
    _, venv = installed
    done = run([str(venv / "bin" / "daifu"), "--version"], cwd=tmp_path)
    assert done.stdout.strip() == "daifu 0.1.0"
