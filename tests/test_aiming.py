"""A repair that aims the program's own effects needs a person (issue 28).

`tests.hostile_payloads.train_and_tidy` deletes the stale files it is given, removes a scratch folder
when told to, and saves a checkpoint. Each edit of `AIMING_EDITS` comes with the right repair of its
crash (float labels) and plain code of its own — an assignment, an `append`, an `if True:` header, a
changed `for` header — yet aims one of those effects at a victim. Each does that harm when nothing
checks it; the allowlist must refuse each, in the crash's live context, naming the effect's file line.
"""

from __future__ import annotations

import dataclasses
import inspect
import textwrap
import traceback
from pathlib import Path
from typing import Any

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

torch = pytest.importorskip("torch")

from daifu.core.crash import Crash
from daifu.decide.allowlist import check_safety, check_surgery_safety, context_for
from tests import hostile_payloads
from tests.botfixtures import crash_from
from tests.hostile_payloads import AIMING_EDITS, FIX, Aiming, train_and_tidy


def arguments(tmp_path: Path, labels: Any) -> dict[str, Any]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    return {
        "model": model,
        "optimizer": torch.optim.SGD(model.parameters(), lr=0.1),
        "batches": [(torch.randn(2, 4), labels)],
        "stale_files": [],
        "scratch_dir": str(tmp_path / "victim_dir"),  # removed only when `cleanup` is true
        "cleanup": False,
        "checkpoint_path": str(tmp_path / "model.pt"),
    }


def places(tmp_path: Path) -> tuple[Path, Path]:
    victim, victim_dir = tmp_path / "victim", tmp_path / "victim_dir"
    victim.write_text("keep me")
    victim_dir.mkdir()
    return victim, victim_dir


def live_crash(tmp_path: Path) -> Crash:
    crash = crash_from(train_and_tidy, **arguments(tmp_path, torch.tensor([0.0, 1.0])))
    frame = next(f for f, _ in traceback.walk_tb(crash.exception.__traceback__) if f.f_code is train_and_tidy.__code__)
    return dataclasses.replace(crash, frame=frame)


def run_unchecked(edit: Aiming, code: str, tmp_path: Path) -> None:
    """What the edit does when nothing checks it: the surgery's function run, or the action run in the
    crashed frame's names and the fixed function run on with them."""
    given = arguments(tmp_path, torch.tensor([0, 1]))
    namespace = dict(vars(hostile_payloads))
    if edit.kind == "surgery":
        exec(compile(textwrap.dedent(code), hostile_payloads.__file__, "exec"), namespace)
        namespace["train_and_tidy"](**given)
        return
    frame = {**given, "y": torch.tensor([0.0, 1.0])}
    exec(code, namespace, frame)
    train_and_tidy(**{name: frame[name] for name in given})


def harmed(edit: Aiming, victim: Path, victim_dir: Path) -> bool:
    if edit.harm == "victim":
        return not victim.exists() or victim.read_bytes() != b"keep me"
    return not victim_dir.exists()


@pytest.mark.parametrize("edit", [e for e in AIMING_EDITS if e.harm != "none"], ids=lambda e: e.name)
def test_each_aiming_edit_does_harm_when_nothing_checks_it(edit: Aiming, tmp_path: Path) -> None:
    victim, victim_dir = places(tmp_path)
    run_unchecked(edit, edit.code(inspect.getsource(train_and_tidy), str(victim), str(victim_dir)), tmp_path)
    assert harmed(edit, victim, victim_dir)


@pytest.mark.parametrize("edit", AIMING_EDITS, ids=lambda e: e.name)
def test_each_aiming_edit_needs_a_person(edit: Aiming, tmp_path: Path) -> None:
    victim, victim_dir = places(tmp_path)
    crash = live_crash(tmp_path)
    assert "expected target dtype to be Long" in str(crash.exception)
    context = context_for(crash)
    code = edit.code(crash.source, str(victim), str(victim_dir))
    verdict = check_surgery_safety(code, context) if edit.kind == "surgery" else check_safety(code, context)
    assert not verdict.ok
    effects = {"os.remove(f)": "os.remove", "shutil.rmtree(scratch_dir)": "shutil.rmtree", "torch.save(": "torch.save"}
    numbered = code if edit.kind == "surgery" else crash.source  # a surgery's lines are its new version's
    lines = {crash.first_lineno + i: name for i, line in enumerate(numbered.splitlines())
             for text, name in effects.items() if text in line}
    assert any(reason.startswith(f"line {line}: ") and name in reason and "needs a person" in reason
               for reason in verdict.reasons for line, name in lines.items()), verdict.reasons


def test_the_right_repair_alone_is_admitted(tmp_path: Path) -> None:
    crash = live_crash(tmp_path)
    context = context_for(crash)
    assert check_surgery_safety(crash.source.replace(*FIX), context).ok
    assert check_safety("y = y.long()", context).ok


def load_weights(model, path):
    model.load_state_dict(torch.load(path))
    return model


@pytest.fixture
def weights_crash(tmp_path: Path) -> tuple[Crash, Path]:
    folder = tmp_path / "pretrained"
    folder.mkdir()
    torch.save(torch.nn.Linear(2, 2).state_dict(), folder / "weights-v2.pt")
    (tmp_path / "secret.txt").write_text("OPENAI_API_KEY=sk-not-a-key")
    (folder / "link.pt").symlink_to("/proc/self/environ")
    crash = crash_from(load_weights, torch.nn.Linear(2, 2), str(folder / "weights_v2.pt"))
    frame = next(f for f, _ in traceback.walk_tb(crash.exception.__traceback__) if f.f_code is load_weights.__code__)
    return dataclasses.replace(crash, frame=frame), folder


def test_a_read_pointed_at_another_file_of_the_folder_the_program_named_is_admitted(
    weights_crash: tuple[Crash, Path]
) -> None:
    crash, folder = weights_crash
    assert isinstance(crash.exception, FileNotFoundError)
    context = context_for(crash)
    assert check_safety(f"path = {str(folder / 'weights-v2.pt')!r}", context).ok
    assert check_safety(f"import pathlib\npath = pathlib.Path({str(folder / 'weights-v2.pt')!r})", context).ok


@pytest.mark.parametrize("aim", ["/proc/self/environ", "{folder}/../secret.txt", "{folder}/link.pt",
                                 "{folder}/missing.pt"])
def test_a_read_pointed_anywhere_else_needs_a_person(aim: str, weights_crash: tuple[Crash, Path]) -> None:
    crash, folder = weights_crash
    verdict = check_safety(f"path = {aim.replace('{folder}', str(folder))!r}", context_for(crash))
    assert len(verdict.reasons) == 1 and "the program's own `torch.load`" in verdict.reasons[0], verdict.reasons
    assert verdict.reasons[0].startswith(f"line {crash.first_lineno + 1}: ")


def append_line(path, text):
    """The program's own logger: what it writes is data, where it writes is `path`."""
    with open(path, "a", encoding="utf-8") as stream:
        stream.write(text + "\n")


def train_logging(model, x, y, log_path):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    append_line(log_path, f"loss {loss.item()}")
    return loss.item()


@pytest.fixture
def logging_crash(tmp_path: Path) -> Crash:
    crash = crash_from(train_logging, torch.nn.Linear(4, 3), torch.randn(2, 4), torch.tensor([0.0, 1.0]),
                       str(tmp_path / "log.txt"))
    frame = next(f for f, _ in traceback.walk_tb(crash.exception.__traceback__) if f.f_code is train_logging.__code__)
    return dataclasses.replace(crash, frame=frame)


def test_a_change_that_flows_into_what_the_programs_helper_writes_is_admitted(logging_crash: Crash) -> None:
    """The helper's parameters are followed inside it: `text` is only written, `path` says where."""
    fixed = logging_crash.source.replace("model(x), y)", "model(x), y.long())")
    assert check_surgery_safety(fixed, context_for(logging_crash)).ok


def test_a_change_that_aims_where_the_programs_helper_writes_needs_a_person(
    logging_crash: Crash, tmp_path: Path
) -> None:
    victim = str(tmp_path / "victim")
    aimed = logging_crash.source.replace("    append_line(", f"    log_path = {victim!r}\n    append_line(")
    verdict = check_surgery_safety(aimed.replace("model(x), y)", "model(x), y.long())"), context_for(logging_crash))
    assert verdict.reasons == (
        f"line {logging_crash.first_lineno + 3}: the program's own `append_line` (which reaches `open` at "
        f"test_aiming.py:{inspect.getsourcelines(append_line)[1] + 2}) reaches files, processes or the network, "
        "and the change changes what aims it (`log_path`): a repair that aims the program's effects needs a person",
    )


def read_words(path):
    """The program's own reader: it opens `path` to read it."""
    with open(path, encoding="utf-8") as stream:
        return stream.read().split()


def evaluate(data_dir, best, model):
    valid_path = data_dir / "wiki.valid.token"
    words = read_words(valid_path)
    if len(words) > best:
        torch.save(model.state_dict(), data_dir / "best.pt")
    return words


@pytest.fixture
def reader_crash(tmp_path: Path) -> tuple[Crash, Path]:
    (tmp_path / "wiki.valid.tokens").write_text("a b c")
    crash = crash_from(evaluate, tmp_path, 0, torch.nn.Linear(1, 1))
    frame = next(f for f, _ in traceback.walk_tb(crash.exception.__traceback__) if f.f_code is evaluate.__code__)
    return dataclasses.replace(crash, frame=frame), tmp_path


def test_a_read_through_the_programs_helper_pointed_beside_is_admitted(reader_crash: tuple[Crash, Path]) -> None:
    crash, folder = reader_crash
    context = context_for(crash)
    assert check_safety(f"import pathlib\nvalid_path = pathlib.Path({str(folder / 'wiki.valid.tokens')!r})", context).ok
    verdict = check_safety("import pathlib\nvalid_path = pathlib.Path('/etc/hostname')", context)
    assert "the program's own `read_words` (which reaches `open` at" in str(verdict), verdict


def test_whether_a_file_is_written_is_no_aim_but_whether_one_is_deleted_is(reader_crash: tuple[Crash, Path]) -> None:
    """`best` decides whether the program saves its checkpoint (to the path it chose): not an aim.
    `cleanup` deciding whether it removes a folder is (`cleanup_flag_action`)."""
    crash, _ = reader_crash
    assert check_safety("best = 10", context_for(crash)).ok


def train_printing(model, x, y, losses):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    print("Loss: {:.6f}".format(loss.item()))  # noqa: UP032 - the program's own style, what the test is about
    losses.remove(0.0) if 0.0 in losses else None
    losses.append(loss.item())
    return losses


def test_the_programs_own_formatting_and_lists_are_no_effects(tmp_path: Path) -> None:
    """DLFailureBenchmark's ext_siamese: `'...'.format(loss)` in the program once counted as a system
    call (`format` is refused in a repair's code), so a fix of `loss` needed a person."""
    crash = crash_from(train_printing, torch.nn.Linear(4, 3), torch.randn(2, 4), torch.tensor([0.0, 1.0]), [0.0])
    frame = next(f for f, _ in traceback.walk_tb(crash.exception.__traceback__) if f.f_code is train_printing.__code__)
    crash = dataclasses.replace(crash, frame=frame)
    fixed = crash.source.replace("model(x), y)", "model(x), y.long())")
    assert check_surgery_safety(fixed, context_for(crash)).ok


class SetsItsGroups(torch.nn.Linear):
    def configure_optimizers(self, settings: dict[str, float]) -> torch.optim.Optimizer:
        no_decay = set()
        for name, _ in self.named_parameters():
            if name.endswith("bias"):
                no_decay.add(name)
        return torch.optim.SGD(self.parameters(), lr=settings["lr"])


class Trainer:
    def __init__(self, model: torch.nn.Module, batches: list[torch.Tensor]) -> None:
        self.model, self.batches, self.settings = model, batches, {"lr": 0.1}

    def run(self) -> float:
        model, settings = self.model, self.settings
        self.optimizer = model.configure_optimizers(settings)
        for x in self.batches:
            self.loss = model(x).pow(2).mean()
            self.optimizer.zero_grad()
            self.loss.backward()
            self.optimizer.step()
        return float(self.loss.detach())


def test_a_helper_adding_to_a_set_it_built_is_no_effect() -> None:
    """minGPT's `configure_optimizers` collects parameter names in `set()`s: `no_decay.add(name)`, a method
    named as some system objects' (a tar archive's `add`), was taken for reaching the system, so a fix in
    the method calling it, which rebinds an attribute of `self` that aims it, needed a person. A name the
    helper binds only to a container it built is that container."""
    trainer = Trainer(SetsItsGroups(16, 1), [torch.randn(8, 16), torch.randn(8, 4, 4)])
    crash = crash_from(Trainer.run, trainer)
    assert "cannot be multiplied" in str(crash.exception), crash.exception
    frame = next(f for f, _ in traceback.walk_tb(crash.exception.__traceback__) if f.f_code is Trainer.run.__code__)
    crash = dataclasses.replace(crash, frame=frame)
    fixed = crash.source.replace("model(x).pow(2)", "model(x.flatten(1)).pow(2)")
    verdict = check_surgery_safety(fixed, context_for(crash))
    assert verdict.ok, verdict.reasons
