"""Unattended, a repair above the crash is applied only when the statements it runs again only compute.

A surgery that fixes the statement where a bad value was made resumes there (issue 25.6): the
statements down to the crash run a second time. Each test runs a real training loop that crashes for
real, in automatic mode with `approve="auto"`, against a scripted bot over HTTP offering the right edit
a few lines above the crash, with something different between:

- only computation (a cast, a model without dropout or batch statistics): applied, and the run ends as
  the fixed program does;
- a random draw (an augmentation), a counter (`seen += len(x)`), a model with dropout in training: not
  applied — the terminal names the statement and why — and the run ends as it would without DaiFu;
- the same model in evaluation mode: applied.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

import daifu
from daifu.core import trial
from repairbot.protocol import Suggestion
from tests.botfixtures import ScriptedBot, served_scripted_bot
from tests.copies import fresh

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

pytestmark = pytest.mark.skipif(trial.unavailable() is not None, reason=f"no trials here: {trial.unavailable()}")

BAD = "        labels = torch.tensor(rows, dtype=torch.float64)\n"
GOOD = "        labels = torch.tensor(rows, dtype=torch.long)\n"


def fit_plain(model, optimizer, data, seen):
    for x, rows in data:
        labels = torch.tensor(rows, dtype=torch.float64)
        scores = model(x)
        loss = F.cross_entropy(scores, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


def fit_augmented(model, optimizer, data, seen):
    for x, rows in data:
        labels = torch.tensor(rows, dtype=torch.float64)
        x = x + 0.01 * torch.randn_like(x)
        loss = F.cross_entropy(model(x), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


def fit_counting(model, optimizer, data, seen):
    for x, rows in data:
        labels = torch.tensor(rows, dtype=torch.float64)
        seen[0] += len(rows)
        loss = F.cross_entropy(model(x), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


@pytest.fixture(scope="module")
def bot() -> Iterator[tuple[ScriptedBot, str]]:
    with served_scripted_bot() as served:
        yield served


def data() -> list[tuple[Any, list[int]]]:
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(12, 4, generator=generator)
    rows = (x[:, 0] > 0).long().tolist()
    return [(x[i : i + 4], rows[i : i + 4]) for i in range(0, 12, 4)]


def model_of(kind: str) -> nn.Module:
    torch.manual_seed(1)
    if kind == "dropout":
        return nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.3), nn.Linear(8, 2))
    if kind == "eval":
        return nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.3), nn.Linear(8, 2)).eval()
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def run(program: Callable[..., Any], kind: str, url: str | None, tmp_path: Path) -> tuple[Any, nn.Module, list[int]]:
    model, seen = model_of(kind), [0]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(2)
    if url is None:
        return program(model, optimizer, data(), seen), model, seen
    daifu.configure(mode="automatic", approve="auto", bot_url=url, workspace=tmp_path / "ws")
    return daifu.transform(fresh(program))(model, optimizer, data(), seen), model, seen


def fixed(program: Callable[..., Any]) -> Callable[..., Any]:
    namespace: dict[str, Any] = {}
    exec(inspect.getsource(program).replace(BAD, GOOD), program.__globals__, namespace)
    return namespace[program.__name__]  # type: ignore[no-any-return]


def offer_fix(scripted: ScriptedBot, program: Callable[..., Any]) -> None:
    source = inspect.getsource(program)
    assert BAD in source
    scripted.suggestions = [Suggestion(kind="surgery", code=source.replace(BAD, GOOD),  # type: ignore[arg-type]
                                       explanation="Class indices are integers.", confidence=0.9)]


@pytest.mark.parametrize(("program", "kind"), [(fit_plain, "plain"), (fit_plain, "eval")])
def test_a_fix_above_statements_that_only_compute_is_applied(bot, tmp_path: Path, program, kind) -> None:
    scripted, url = bot
    offer_fix(scripted, program)
    loss, model, _ = run(program, kind, url, tmp_path)
    plain_loss, plain_model, _ = run(fixed(program), kind, None, tmp_path)
    assert loss == plain_loss
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), plain_model.parameters(), strict=True))


@pytest.mark.parametrize(
    ("program", "kind", "said"),
    [
        (fit_augmented, "plain", "calls `torch.randn_like`, which draws random numbers"),
        (fit_counting, "plain", "writes into `seen[0]`"),
        (fit_plain, "dropout", "in training mode, which draws random numbers for its dropout"),
    ],
)
def test_a_fix_above_statements_with_effects_needs_a_person(
    bot, tmp_path: Path, capsys: pytest.CaptureFixture[str], program, kind, said
) -> None:
    scripted, url = bot
    offer_fix(scripted, program)
    with pytest.raises(RuntimeError, match="expected scalar type Long|Long"):
        run(program, kind, url, tmp_path)
    err = capsys.readouterr().err
    refusal = next(line for line in err.splitlines() if "needs a person" in line)
    assert "resumes above the crash" in refusal, refusal
    suggestions = (tmp_path / "ws" / "repairbot_suggestions.jsonl").read_text()
    assert said in suggestions  # the terminal's line is cut short; the record holds every reason


def test_a_fix_inserted_above_the_crash_runs_once_and_is_applied(bot, tmp_path: Path) -> None:
    """`labels = labels.long()` inserted above the crash reads the name it writes; it never ran before, so
    nothing was changed twice: applied, and the run ends as the program fixed the same way."""
    scripted, url = bot
    inserted = "        labels = labels.long()\n"
    anchor = "        scores = model(x)\n"
    source = inspect.getsource(fit_plain)
    scripted.suggestions = [Suggestion(kind="surgery", code=source.replace(anchor, inserted + anchor),  # type: ignore[arg-type]
                                       explanation="Class indices are integers.", confidence=0.9)]
    loss, model, _ = run(fit_plain, "plain", url, tmp_path)
    namespace: dict[str, Any] = {}
    exec(source.replace(anchor, inserted + anchor), fit_plain.__globals__, namespace)
    plain_loss, plain_model, _ = run(namespace["fit_plain"], "plain", None, tmp_path)
    assert loss == plain_loss
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), plain_model.parameters(), strict=True))



def fit_weighted(model, optimizer, data, seen):
    for x, rows in data:
        per_sample = F.cross_entropy(model(x), torch.tensor(rows), reduction="none")
        loss = per_sample * 2.0
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


def test_resetting_the_gradients_again_changes_nothing_and_the_fix_above_is_applied(automatic, tmp_path: Path) -> None:
    """`backward()` on a vector; the embedded bot's fix reduces it where it is computed, above
    `optimizer.zero_grad()`, which runs again: it sets every gradient to None whatever it finds, so
    two runs leave what one leaves. Applied unattended, and the run ends as the fixed program does."""
    model, seen = model_of("plain"), [0]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = daifu.transform(fresh(fit_weighted))(model, optimizer, data(), seen)
    assert [r["decision"] for r in automatic()] == ["Surgery"]
    namespace: dict[str, Any] = {}
    source = inspect.getsource(fit_weighted).replace("loss = per_sample * 2.0", "loss = (per_sample * 2.0).mean()")
    exec(source, fit_weighted.__globals__, namespace)
    plain_loss, plain_model, _ = run(namespace["fit_weighted"], "plain", None, tmp_path)
    assert loss == plain_loss
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), plain_model.parameters(), strict=True))


def test_only_torch_own_zero_grad_is_a_reset() -> None:
    """The reset is known by identity: a subclass's own `zero_grad` (here it counts its calls) is judged as any
    call DaiFu cannot read."""
    import ast

    from daifu.decide.rerun_effects import rerun_effects
    from daifu.decide.reruns import Rerun

    class Counting(torch.optim.SGD):
        calls = 0

        def zero_grad(self, set_to_none: bool = True) -> None:
            self.calls += 1
            super().zero_grad(set_to_none)

    parameters = list(nn.Linear(2, 1).parameters())
    statement = ast.parse("optimizer.zero_grad()\nmodel.zero_grad()").body
    found = [Rerun(1, "optimizer.zero_grad()", statement[0]), Rerun(2, "model.zero_grad()", statement[1])]
    plain = {"optimizer": torch.optim.SGD(parameters, lr=0.1), "model": nn.Linear(2, 1)}
    assert rerun_effects(found, plain, {}) == []
    counting = {"optimizer": Counting(parameters, lr=0.1), "model": nn.Linear(2, 1)}
    assert rerun_effects(found, counting, {}) == [
        "line 1 calls `optimizer.zero_grad`, which DaiFu cannot tell only computes"]


def _judged(source: str, names: dict[str, Any]) -> list[str]:
    import ast

    from daifu.decide.rerun_effects import rerun_effects
    from daifu.decide.reruns import Rerun

    return rerun_effects([Rerun(s.lineno, "", s) for s in ast.parse(source).body], names, {})


def test_a_name_counted_up_again_is_a_second_count() -> None:
    """`count += 1` reads the count it changed: run again, it counts twice (not only `seen[0] += 1`)."""
    assert _judged("y = x * 2\ncount += 1\n", {"x": 1, "count": 0}) == [
        "line 2 reads `count`, which the repeated statements already changed"]


def test_names_a_branch_binds_before_it_reads_them_are_made_afresh() -> None:
    """An `if` run again from its header binds `p` and `w` before reading them, in each branch that reads
    them: nothing stale; a name read in a branch before it is bound is."""
    branches = "if a:\n    p = x * 2\n    w = p + 1\n    loss = w\nelse:\n    loss = x\n"
    assert _judged(branches, {"x": 1, "a": True}) == []
    assert _judged("if a:\n    w = p + 1\n    p = x * 2\n", {"x": 1, "a": True, "p": 0}) == [
        "line 1 reads `p`, which the repeated statements already changed"]


def test_the_limits_of_a_dtype_and_what_a_value_is_only_compute() -> None:
    """`torch.finfo(p.dtype).tiny` (a log kept off 0), `torch.is_tensor`, the default dtype: read again, the
    same; setting the random seed again is not."""
    names = {"torch": torch, "p": torch.rand(3)}
    assert _judged("q = p.clamp_min(torch.finfo(p.dtype).tiny)\nsmall = torch.iinfo(torch.int8).min\n"
                   "ok = torch.is_tensor(p)\nd = torch.get_default_dtype()\n", names) == []
    assert _judged("torch.manual_seed(0)\n", names) == [
        "line 1 calls `torch.manual_seed`, which DaiFu cannot tell only computes"]


def fit_balanced(model, optimizer, data, seen):
    for step, (x, rows) in enumerate(data):
        labels = torch.tensor(rows)
        scores = model(x)
        if step % 3 == 1:
            per_sample = F.cross_entropy(scores, labels, reduction="none")
            balance = (1.0 / torch.bincount(labels, minlength=2).float().clamp(min=1))[labels]
            loss = balance * per_sample
        else:
            loss = F.cross_entropy(scores, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


def test_a_branch_run_again_that_computes_its_own_values_is_applied(automatic, tmp_path: Path) -> None:
    """`backward()` on the weighted vector of one branch; the embedded bot reduces it with `.mean()` in each
    branch, and the run resumes at the `if`: its branch binds `per_sample` and `balance` before reading
    them, so running it again only computes. Applied, and the run ends as the fixed program does."""
    model, seen = model_of("plain"), [0]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = daifu.transform(fresh(fit_balanced))(model, optimizer, data() * 2, seen)
    assert [r["decision"] for r in automatic()] == ["Surgery"]
    namespace: dict[str, Any] = {}
    source = inspect.getsource(fit_balanced).replace("loss = balance * per_sample", "loss = (balance * per_sample).mean()")
    exec(source, fit_balanced.__globals__, namespace)
    plain_model = model_of("plain")
    plain_loss = namespace["fit_balanced"](plain_model, torch.optim.SGD(plain_model.parameters(), lr=0.1), data() * 2, [0])
    assert loss == pytest.approx(plain_loss, rel=1e-6)
    assert all(torch.allclose(p, q, atol=1e-7) for p, q in zip(model.parameters(), plain_model.parameters(), strict=True))
