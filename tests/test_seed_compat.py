"""Issue 11, item by item, through the public API: the prototype's programs run unchanged.

1. `@daifu.transform(globals())` keeps the prototype's scope model (and `@daifu.transform` DaiFu's);
2. the record's life cycle: `Program Begin` at the first vaccination, the lock file, the copies;
3. several plays for one crash (`daifu.Plays`, `[['Action', 'Surgery']]`);
4. `daifu.logger`, whose lines land in the record;
5. `Pass` runs the faulty statement again, `Skip` goes on after it;
6. every record event on one line;
7. `daifu run`/`replay` leave a function already decorated with `daifu.transform` as it is.
The programs of `tests/seed_programs/` run them together (`tests/test_seed_programs.py`).
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import daifu
from daifu import config
from daifu.cli.launch import vaccinated_code
from daifu.core import decisions, kinds
from daifu.state import RUN
from daifu.store import record

ROOT = Path(__file__).resolve().parents[1]
_loaded = itertools.count()


@pytest.fixture(autouse=True)
def _fresh_run() -> Iterator[None]:
    RUN.reset()
    yield
    RUN.reset()


def load(tmp_path: Path, source: str) -> ModuleType:
    """`source` as a module of its own, from a file (DaiFu reads a function's source from its file)."""
    path = tmp_path / f"seedmod{next(_loaded)}.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def record_events(tmp_path: Path) -> list[str]:
    return [line.split(" - ", 1)[1] for line in (tmp_path / "experiment_record.log").read_text().splitlines()]


def run_python(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    """`code` run as a script of its own in `tmp_path` (a fresh process: a fresh record)."""
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(code))
    env = {"PYTHONPATH": str(ROOT), "DAIFU_RECORD": str(tmp_path / "experiment_record.log")}
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)


# -- 1. the scope of transform(globals()) ---------------------------------------------------------

SCOPE_EXAMPLE = """
    import daifu

    def step():
        return lr * 2          # 'lr' is a local of main()

    @DECORATOR
    def main():
        lr = 0.5
        out = step()
        return out
"""


def test_the_issue_example_runs_under_the_seed_form_and_keeps_locals_under_the_plain_one(tmp_path: Path) -> None:
    seed = load(tmp_path, SCOPE_EXAMPLE.replace("DECORATOR", "daifu.transform(globals())"))
    assert seed.main() == 1.0 and seed.out == 1.0 and seed.lr == 0.5  # module code after the call sees them
    for plain_form in ("daifu.transform", "daifu.transform()"):
        plain = load(tmp_path, SCOPE_EXAMPLE.replace("DECORATOR", plain_form))
        daifu.set_policy(lambda crash: daifu.Raise())
        with pytest.raises(NameError, match="'lr' is not defined"):
            plain.main()
        assert not hasattr(plain, "out") and not hasattr(plain, "lr")


def test_entry_and_exit_save_and_restore_the_restorable_names_only(tmp_path: Path) -> None:
    module = load(tmp_path, """
        import daifu

        epochs = 100
        lr = 9.0
        count = 0

        def seen():
            return epochs, lr

        @daifu.transform(globals())
        def main(epochs, *rest, scale=2):
            inside = seen()
            lr = 0.5
            count += 1
            pair_a, pair_b = 1, 2
            squares = [k * k for k in range(epochs)]
            return inside, seen(), rest, scale, unset_before
    """)
    assert not hasattr(module, "unset_before")
    inside, later, rest, scale, unset = module.main(3, "x", scale=5)
    assert inside == (3, 9.0) and later == (3, 0.5)  # a parameter at once; `lr` from its assignment on
    assert (rest, scale, unset) == (("x",), 5, None) and module.unset_before is None  # read unbound: None
    assert (module.epochs, module.lr) == (100, 9.0)  # a parameter and an `=` name: restored
    assert (module.count, module.pair_a, module.pair_b) == (1, 1, 2)  # `+=` and tuple targets: kept
    assert module.squares == [0, 1, 4] and module.k is None  # the comprehension keeps its own variable
    assert module.main(2)[0] == (2, 9.0) and module.count == 2


def test_a_callee_rebinding_a_global_is_read_at_the_next_statement(tmp_path: Path) -> None:
    module = load(tmp_path, """
        import daifu

        def decay():
            global lr
            lr = lr * 0.5

        @daifu.transform(globals())
        def main():
            lr = 0.8
            decay()
            return lr
    """)
    assert module.main() == 0.4


def test_recursion_restores_each_callers_names(tmp_path: Path) -> None:
    module = load(tmp_path, """
        import daifu

        @daifu.transform(globals())
        def fact(n):
            if n <= 1:
                return 1
            below = fact(n - 1)
            return n * below
    """)
    assert module.fact(5) == 120
    assert (module.n, module.below) == (5, 24)  # each inner call put back its caller's values


def test_names_are_restored_when_the_call_raises(tmp_path: Path) -> None:
    module = load(tmp_path, """
        import daifu

        lr = 1.0

        @daifu.transform(globals())
        def main():
            lr = 2.0
            raise KeyError(lr)
    """)
    daifu.set_policy(lambda crash: daifu.Raise())
    with pytest.raises(KeyError):
        module.main()
    assert module.lr == 1.0


def test_a_nested_def_runs_when_reached_and_is_a_module_global(tmp_path: Path) -> None:
    module = load(tmp_path, """
        import daifu

        lr = 1.0

        @daifu.transform(globals())
        def main():
            lr = 2.0
            def helper(v=lr):
                return v
            return helper()
    """)
    assert module.main() == 2.0 and module.helper() == 2.0  # its default is evaluated when reached


def test_closure_variables_stay_closure_variables(tmp_path: Path) -> None:
    module = load(tmp_path, """
        import daifu

        def outer():
            scale = 3
            @daifu.transform(globals())
            def inner(x):
                y = x * scale
                return y
            return inner
    """)
    assert module.outer()(2) == 6 and module.y == 6 and not hasattr(module, "scale")


def test_names_python_cannot_make_global_stay_local(tmp_path: Path) -> None:
    """An annotated name (`x: int = 1`), and a name a nested function declares `nonlocal`."""
    module = load(tmp_path, """
        import daifu

        @daifu.transform(globals())
        def main():
            x: int = 1
            count = 0
            def bump():
                nonlocal count
                count += 1
            bump()
            total = x + count
            return total
    """)
    assert module.main() == 2 and module.total == 2
    assert not hasattr(module, "x") and not hasattr(module, "count") and callable(module.bump)


def test_another_dict_than_the_functions_globals_is_refused() -> None:
    def main() -> int:
        return 1

    with pytest.raises(TypeError, match="must be the globals of the module that defines it"):
        daifu.transform({"x": 1})(main)


def test_zero_argument_super_keeps_ordinary_locals_with_a_warning(tmp_path: Path) -> None:
    with pytest.warns(RuntimeWarning, match="zero-argument super"):
        module = load(tmp_path, """
            import daifu

            class Base:
                def size(self):
                    return 1

            class Net(Base):
                @daifu.transform(globals())
                def size(self):
                    width = super().size() + 1
                    return width
        """)
    assert module.Net().size() == 2 and not hasattr(module, "width")


def test_a_crash_shows_and_a_repair_rebinds_the_module_variables(tmp_path: Path) -> None:
    module = load(tmp_path, """
        import daifu

        def batches():
            return [1, 2, "3", 4]

        @daifu.transform(globals())
        def main():
            total = 0
            for item in batches():
                total = total + item
            return total
    """)
    seen: list[daifu.Crash] = []

    def policy(crash: daifu.Crash) -> daifu.Action:
        seen.append(crash)
        return daifu.Action("item = int(item)\nclass Note:\n    def again(self):\n        return Note\nnote = Note()")

    daifu.set_policy(policy)
    assert module.main() == 10
    assert seen[0].locals["item"] == "3" and seen[0].locals["total"] == 3
    assert module.item == 4 and module.note.again() is module.Note  # the action ran in the module's namespace


def test_a_surgery_replaces_the_body_and_keeps_the_scope(tmp_path: Path) -> None:
    module = load(tmp_path, """
        import daifu

        def read():
            return lr

        @daifu.transform(globals())
        def main(data):
            lr = 0.5
            total = 0
            for item in data:
                total = total + item
            return total, read()
    """)
    source = Path(str(module.__file__)).read_text().split("@daifu.transform(globals())\n", 1)[1]
    daifu.set_policy(lambda crash: daifu.Surgery("@daifu.transform(globals())\n" + source.replace(
        "total = total + item", "total = total + int(item)")))
    assert module.main([1, "2"]) == (3, 0.5)
    assert module.main(["4"]) == (4, 0.5)  # the new body is the function from now on
    assert "int(item)" in module.main.__daifu__.current.source and module.lr == 0.5


def test_a_resume_inside_an_except_as_handler_keeps_its_name(tmp_path: Path) -> None:
    # The crashed frame unwinds through the handler, whose cleanup unbinds `e` (a module global
    # here): the run resumes inside the handler, where `e` is bound again.
    module = load(tmp_path, """
        import daifu

        fire = [True]

        def flaky(t):
            if fire[0]:
                fire[0] = False
                raise RuntimeError("once")
            t.append("f")

        def fy(a, b):
            t = []
            try:
                if b % 2 == 0:
                    raise ValueError(1)
            except ValueError as e:
                flaky(t)
                t.append(("caught", e.args[0]))
            return t

        fire[0] = False
        plain = fy(1, 2)
        fire[0] = True
        fy = daifu.transform(globals())(fy)
    """)
    assert module.plain == ["f", ("caught", 1)]
    daifu.set_policy(lambda crash: daifu.Retry())
    assert module.fy(1, 2) == ["f", ("caught", 1)]
    assert not hasattr(module, "e")  # left as Python leaves a handler


# -- 2. the record's life cycle ---------------------------------------------------------------------


def test_the_record_begins_at_the_first_vaccination_never_at_import(tmp_path: Path) -> None:
    done = run_python(tmp_path, """
        import os, daifu, daifu.store.record
        print("after import", os.path.exists("experiment_record.log"))
        @daifu.transform
        def f():
            return 1
        print("after transform", open("experiment_record.log").read().count("Program Begin"))
    """)
    assert "after import False" in done.stdout and "after transform 1" in done.stdout, done.stderr


def test_a_run_rewrites_the_record_unless_the_lock_file_says_it_continues(tmp_path: Path) -> None:
    program = """
        import daifu
        @daifu.transform
        def f():
            return 1
        daifu.log_program_end(f())
    """
    for _ in range(2):
        run_python(tmp_path, program)
    assert record_events(tmp_path) == ["Program Begin", "Program End with Quality Measure 1"]
    (tmp_path / "experiment_record.log.lock").touch()
    run_python(tmp_path, program)
    assert record_events(tmp_path) == [
        "Program Begin", "Program End with Quality Measure 1", "Program End with Quality Measure 1"]
    assert not (tmp_path / "experiment_record.log.lock").exists()  # log_program_end removes it


def test_log_program_end_copies_the_record_of_a_repeated_experiment_or_a_milestone(tmp_path: Path) -> None:
    assert "REPEAT_ACTIONS" not in config.TRANSFORM_REGISTRY  # no default: its presence is the switch
    daifu.log_program_end(0.5)
    assert list(tmp_path.glob("experiment_record_*.log")) == []
    config.TRANSFORM_REGISTRY["REPEAT_ACTIONS"] = None  # a repeated experiment with nothing to repair
    daifu.log_program_end(0.5)
    (copy,) = tmp_path.glob("experiment_record_*.log")
    assert float(copy.stem.split("_")[-1]) > 0 and copy.read_text() == (tmp_path / "experiment_record.log").read_text()
    del config.TRANSFORM_REGISTRY["REPEAT_ACTIONS"]
    daifu.log_program_end("q", "runs/log", True)
    (milestone,) = (tmp_path / "runs" / "log").glob("experiment_record_*.log")
    assert milestone.read_text().splitlines()[-1].endswith("Program End with Quality Measure q")


# -- 3. several plays for one crash -------------------------------------------------------------------

ACCUMULATE = """
    import daifu

    @daifu.transform
    def main(data):
        total = 0
        seen = []
        for item in data:
            total = total + item
            seen.append(item)
        return total, seen
"""


def fixed(module: ModuleType, old: str, new: str) -> str:
    source = Path(str(module.__file__)).read_text()
    return source[source.index("@daifu.transform"):].replace(old, new)


def test_plays_are_carried_out_in_order_with_one_resume(tmp_path: Path, decide) -> None:
    module = load(tmp_path, ACCUMULATE)
    surgery = daifu.Surgery(fixed(module, "seen.append(item)", "seen.append(str(item))"))
    plays = daifu.Plays((daifu.Action("item = int(item)"), surgery))
    seen = decide(plays)
    assert module.main([1, "2", 3]) == (6, [1, "2", "3"])  # the action's 2, then the surgery's str()
    assert len(seen) == 1 and len(module.main.__daifu__.versions) == 2
    events = record_events(tmp_path)
    assert events[events.index("Repair 1 Begin"):][:4] == [
        "Repair 1 Begin", "Repairing... Action", "Repairing... Surgery", "Repair 1 End"]
    (entry,) = [json.loads(line) for line in (tmp_path / "daifu_workspace" / "repairs.jsonl").read_text().splitlines()]
    assert entry["decision"] == "Plays" and entry["plays"] == ["Action", "Surgery"]
    assert kinds.from_data({"play": "Plays", "steps": entry["steps"]}) == plays


def test_a_refused_step_refuses_the_whole_and_leaves_the_state(tmp_path: Path, decide) -> None:
    module = load(tmp_path, ACCUMULATE)
    renamed = daifu.Surgery(fixed(module, "def main(data)", "def other(data)"))
    seen = decide(daifu.Plays((daifu.Action("item = int(item)\nleaked = 1"), renamed)), daifu.Skip())
    assert module.main([1, "2", 3]) == (4, [1, "2", 3])  # not converted: the second answer skipped the sum
    assert not hasattr(module, "leaked") and len(module.main.__daifu__.versions) == 1
    assert "renames the function" in seen[-1].tried[0][1]
    assert [e for e in record_events(tmp_path) if "Plays" in e or "refused" in e][0].startswith(
        "Repair 1: Action+Surgery from policy refused:")


def test_a_trial_of_several_plays_runs_them_on_a_copy(tmp_path: Path, decide) -> None:
    module = load(tmp_path, ACCUMULATE)
    plays = daifu.Plays((daifu.Action("item = int(item)"), daifu.Retry()))
    verdicts = []

    def tried(crash: daifu.Crash) -> daifu.Plays:
        verdicts.append(crash.trial(plays))
        return plays

    decide(tried)
    assert module.main([1, "2", 3]) == (6, [1, 2, 3])
    if verdicts[0].outcome == "unavailable":  # no sandbox on this machine (libseccomp's binding missing)
        pytest.skip(f"trials are unavailable here: {verdicts[0].detail}")
    assert verdicts[0].outcome == "completed", verdicts[0]


def test_the_codec_stores_plays_and_refuses_what_cannot_be_a_step() -> None:
    plays = daifu.Plays((daifu.Action("x = 1"), daifu.Surgery("def f():\n    pass\n"), daifu.Skip()))
    assert kinds.from_data(json.loads(json.dumps(kinds.to_data(plays)))) == plays
    with pytest.raises(decisions.BadDecision):
        daifu.Plays((daifu.Raise(),))  # type: ignore[arg-type]
    with pytest.raises(decisions.BadDecision):
        kinds.from_data({"play": "Plays", "steps": [{"play": "Plays", "steps": []}]})


# -- 4. daifu.logger -----------------------------------------------------------------------------------


def test_daifu_logger_is_loguru_loaded_on_first_use_and_writes_into_the_record(tmp_path: Path) -> None:
    done = run_python(tmp_path, """
        import sys, daifu
        print("loguru at import", "loguru" in sys.modules)
        @daifu.transform
        def main():
            daifu.logger.info("Program init end")
            data = [1, "2"]
            value = data[1] + 1
            daifu.logger.warning("two\\nlines")
            return value
        daifu.set_policy(lambda crash: daifu.Action("data = [1, 2]"))
        from loguru import logger
        print("same", daifu.logger is logger)
        main()
        daifu.log_program_end()
    """)
    assert "loguru at import False" in done.stdout and "same True" in done.stdout, done.stderr
    lines = (tmp_path / "experiment_record.log").read_text().splitlines()
    assert [line.split(" - ", 1)[1] for line in lines] == [
        "Program Begin", "Program init end", "Repair 1 Begin", "Repairing... Action", "Repair 1 End", "two ⏎ lines",
        "Program End",
    ]
    assert "| INFO     | __main__:main:6 - Program init end" in lines[1]
    assert "| WARNING  | __main__:main:9 - two ⏎ lines" in lines[5]


# -- 5. Pass and Skip -----------------------------------------------------------------------------------


def test_pass_is_a_retry_stored_as_pass_and_skip_has_its_own_name() -> None:
    assert kinds.from_play("Pass", None) == decisions.Pass() and isinstance(decisions.Pass(), daifu.Retry)
    assert kinds.play_name(daifu.Skip()) == "Skip" and kinds.from_play("Skip", None) == daifu.Skip()
    assert kinds.from_data({"play": "Pass"}, kinds.PLAYS_VERSION_1) == daifu.Skip()  # DaiFu's old records


def test_a_recorded_skip_of_an_older_record_still_replays_as_a_skip(tmp_path: Path) -> None:
    module = load(tmp_path, ACCUMULATE)
    entry = {"repair": 1, "function": "main", "line": 9, "exception_type": "TypeError", "decision": "Pass",
             "code": None, "decided_by": "console", "pid": 1}  # as DaiFu wrote it before `Skip` had its name
    (tmp_path / "daifu_workspace").mkdir()
    (tmp_path / "daifu_workspace" / "repairs.jsonl").write_text(json.dumps(entry) + "\n")
    daifu.configure(mode="replay")
    assert module.main([1, "2", 3]) == (4, [1, "2", 3])


# -- 6. one line per event ------------------------------------------------------------------------------


def test_record_lines_stay_one_line_each(tmp_path: Path, decide) -> None:
    record.note("first\nsecond")
    module = load(tmp_path, ACCUMULATE)
    decide(daifu.Action("raise ValueError('a\\nb')"), daifu.Skip())
    module.main(["x"])
    lines = (tmp_path / "experiment_record.log").read_text().splitlines()
    assert any(line.endswith("- first ⏎ second") for line in lines)
    assert any("refused: the action raised ValueError: a ⏎ b" in line for line in lines)


# -- 7. daifu run / replay leave an existing daifu.transform alone ---------------------------------------


@pytest.mark.parametrize(
    ("header", "scope"),
    [
        ("import daifu\n\n@daifu.transform(globals())\n", True),
        ("import daifu as d\n\n@d.transform\n", False),
        ("from daifu import transform as vaccinate\n\n@vaccinate()\n", False),
    ],
)
def test_launch_leaves_a_function_decorated_with_transform_alone(tmp_path: Path, header: str, scope: bool) -> None:
    script = tmp_path / "main.py"
    script.write_text(header + "def main():\n    x = 1\n    return x\n")
    code, names = vaccinated_code(script, [])
    assert names == ["main"] and "__import__" not in code.co_names  # no decorator added
    namespace: dict[str, Any] = {"__name__": "launched"}
    exec(code, namespace)
    assert namespace["main"]() == 1 and ("x" in namespace) == scope  # the script's own form decides


def test_launch_decorates_an_undecorated_main(tmp_path: Path) -> None:
    script = tmp_path / "main.py"
    script.write_text("def main():\n    return 1\n")
    code, names = vaccinated_code(script, [])
    namespace: dict[str, object] = {"__name__": "launched"}
    exec(code, namespace)
    assert names == ["main"] and "__import__" in code.co_names
    assert getattr(namespace["main"], "__daifu__", None) is not None
