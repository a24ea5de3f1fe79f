"""Python errors on live objects and autograd misuse, repaired from what the live objects hold.

Each program below really crashes (a key asked under another name, an attribute or a name mistyped, an
index one past the end of a schedule, a metric over nothing, `.item()` on a vector, `torch.cat` of a list
that starts with `None`, a parameter changed in place under autograd). DaiFu builds the report from the
real exception, in automatic mode with `approve="auto"` and the embedded offline bot; the repair is chosen
by its trial, and the run is compared with its hand-fixed twin. The harmful readings of the same crashes
(a made-up default for the model's state, a near key holding another kind of value, an index clamped into
the data, a guard on a quotient the training reads) are shown never to be proposed.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.extras import BOT

for _package in (*BOT, "torch"):
    pytest.importorskip(_package)

import daifu
from daifu.core.trial import unavailable
from daifu.report.build import build_report
from daifu.state import RUN
from repairbot.generate import generate
from repairbot.protocol import CrashReport
from tests.botfixtures import crash_from
from tests.copies import fresh

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

pytestmark = [pytest.mark.torch, pytest.mark.skipif(unavailable() is not None, reason=f"no trials: {unavailable()}")]


@pytest.fixture
def automatic(tmp_path: Path) -> Callable[[], list[dict[str, Any]]]:
    """Automatic mode, `approve="auto"`, the embedded rules engine (no URL): the repairs made since."""
    daifu.configure(mode="automatic", approve="auto", bot_url=None, workspace=tmp_path / "daifu_workspace")
    before = RUN.recorded
    return lambda: RUN.repairs_since(before)


def data(count: int = 32, features: int = 5, classes: int = 3) -> tuple[Any, Any]:
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(count, features, generator=generator)
    return x, (x @ torch.randn(features, classes, generator=generator)).argmax(dim=1)


def classifier(features: int = 5, classes: int = 3) -> tuple[Any, Any]:
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(features, 8), nn.Tanh(), nn.Linear(8, classes))
    return model, torch.optim.SGD(model.parameters(), lr=0.2)


def same(a: Any, b: Any) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def repaired(repairs: list[dict[str, Any]], error: str, fn: Callable[..., Any]) -> list[str]:
    """The lines the one repair of `repairs` changed, after checking it was the bot's surgery for `error`."""
    assert [(r["exception_type"], r["decision"], r["decided_by"]) for r in repairs] == [(error, "Surgery", "automatic")]
    old = {line.strip() for line in inspect.getsource(fn).splitlines()}
    return [line.strip() for line in repairs[0]["code"].splitlines() if line.strip() not in old]


def report(fn: Callable[..., Any], *args: Any) -> CrashReport:
    return build_report(crash_from(fn, *args))


def generated_lines(fn: Callable[..., Any], *args: Any) -> list[list[str]]:
    """The lines each generated candidate changes (of the families of this change), from a real crash."""
    found, _ = generate(report(fn, *args))
    old = {line.strip() for line in inspect.getsource(fn).splitlines()}
    return [[line.strip() for line in c.code.splitlines() if line.strip() not in old]
            for c in found if c.family in ("lookups", "elements", "leaves")]


# -- a key asked under another name -----------------------------------------------------------------------


def train_logging_metrics(model, optimizer, x, y, epochs, log):
    for epoch in range(epochs):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            accuracy = (model(x).argmax(dim=1) == y).float().mean().item()
        stats = {"loss_train": loss.item(), "acc_val": accuracy, "history": list(log)}
        log.append("epoch {epoch}: loss {loss_train:.4f}, accuracy {val_acc:.3f}".format(epoch=epoch, **stats))


def train_logging_metrics_fixed(model, optimizer, x, y, epochs, log):
    for epoch in range(epochs):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            accuracy = (model(x).argmax(dim=1) == y).float().mean().item()
        stats = {"loss_train": loss.item(), "acc_val": accuracy, "history": list(log)}
        log.append("epoch {epoch}: loss {loss_train:.4f}, accuracy {acc_val:.3f}".format(epoch=epoch, **stats))


def test_a_format_field_asked_under_another_name_reads_the_key_the_dict_holds(automatic) -> None:
    x, y = data()
    model, optimizer = classifier()
    log: list[str] = []
    daifu.transform(fresh(train_logging_metrics))(model, optimizer, x, y, 4, log)

    assert "{acc_val:.3f}" in repaired(automatic(), "KeyError", train_logging_metrics)[0]
    fixed_model, fixed_optimizer = classifier()
    fixed: list[str] = []
    train_logging_metrics_fixed(fixed_model, fixed_optimizer, x, y, 4, fixed)
    assert log == fixed and len(log) == 4 and same(model, fixed_model)


def train_with_history(model, optimizer, batches, history):
    for step, (xb, yb) in enumerate(batches):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
        history["loss"].append(round(loss.item(), 6))
        if step % 2 == 1:
            norm = sum(float(p.grad.norm()) ** 2 for p in model.parameters()) ** 0.5
            history["grad_norm"].append(round(norm, 6))


def test_a_list_missing_from_a_history_dict_is_started_there(automatic) -> None:
    x, y = data(48)
    batches = list(zip(x.split(8), y.split(8)))
    model, optimizer = classifier()
    history: dict[str, list[float]] = {"loss": []}
    daifu.transform(fresh(train_with_history))(model, optimizer, batches, history)

    assert 'history.setdefault("grad_norm", []).append(round(norm, 6))' in repaired(
        automatic(), "KeyError", train_with_history)
    fixed_model, fixed_optimizer = classifier()
    fixed: dict[str, list[float]] = {"loss": [], "grad_norm": []}
    train_with_history(fixed_model, fixed_optimizer, batches, fixed)
    assert history == fixed and len(history["grad_norm"]) == 3 and same(model, fixed_model)


def scaled_forward(x, params):
    return torch.tanh(x @ params["weight"] + params["bias"]) * params["gain"]


def print_f1(metrics):
    print(f"f1 {metrics['val_f1']:.3f}")


def append_accuracy(metrics, scores):
    scores.append(metrics["val_acc"])


def test_a_default_is_made_up_for_the_accounts_never_for_the_model_state() -> None:
    assert ["print(f\"f1 {metrics.get('val_f1', 0.0):.3f}\")"] in generated_lines(
        print_f1, {"loss": 0.25, "acc": 0.5})
    params = {"weight": torch.randn(5, 3, requires_grad=True), "bias": torch.zeros(3, requires_grad=True)}
    assert generated_lines(scaled_forward, torch.randn(4, 5), params) == []  # no `.get("gain", ...)` on tensors


def test_a_near_key_holding_another_kind_of_value_is_not_taken_for_the_wanted_one() -> None:
    scalar = generated_lines(append_accuracy, {"acc_val": 0.75, "loss": 0.3}, [0.5])
    assert ["scores.append(metrics['acc_val'])"] in scalar
    history = generated_lines(append_accuracy, {"acc_val": [0.5, 0.75], "loss": 0.3}, [0.5])
    assert not any("acc_val" in line for lines in history for line in lines)  # a list, where a number belongs


def append_to_history(history, accuracy):
    history["val_acc"].append(accuracy)


def test_a_key_shortened_is_the_key_the_history_holds_not_a_new_list() -> None:
    """`val_acc` asked of a history holding `val_accuracy`: the list the program reads later is the one
    appended to, first; a new list under the short name (`setdefault`) would leave it empty."""
    history = {"loss": [0.5], "val_loss": [0.4], "val_accuracy": [0.7]}
    lines = generated_lines(append_to_history, history, 0.75)
    assert lines and lines[0] == ["history['val_accuracy'].append(accuracy)"], lines
    unrelated = generated_lines(append_to_history, {"loss": [0.5], "val_loss": [0.4]}, 0.75)
    assert not any("val_loss" in line for found in unrelated for line in found), unrelated


# -- an attribute or a name mistyped ---------------------------------------------------------------------


def train_with_decay(model, optimizer, x, y, epochs, lrs):
    for _epoch in range(epochs):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        for group in optimizer.param_group:
            group["lr"] *= 0.5
        lrs.append(optimizer.param_groups[0]["lr"])


def test_an_attribute_typo_reads_the_attribute_python_would_suggest(automatic) -> None:
    x, y = data()
    model, optimizer = classifier()
    lrs: list[float] = []
    daifu.transform(fresh(train_with_decay))(model, optimizer, x, y, 4, lrs)

    assert repaired(automatic(), "AttributeError", train_with_decay) == ["for group in optimizer.param_groups:"]
    assert lrs == [0.1, 0.05, 0.025, 0.0125]
    fixed_model, _ = classifier()
    fixed_optimizer = torch.optim.SGD(fixed_model.parameters(), lr=0.2)
    for _epoch in range(4):
        fixed_optimizer.zero_grad()
        F.cross_entropy(fixed_model(x), y).backward()
        fixed_optimizer.step()
        fixed_optimizer.param_groups[0]["lr"] *= 0.5
    assert same(model, fixed_model)


class Encoded(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.encoder = nn.Linear(5, 6)
        self.head = nn.Linear(6, 3)


def train_encoded(net, optimizer, x, y, epochs):
    losses = []
    for _epoch in range(epochs):
        optimizer.zero_grad()
        hidden = torch.relu(net.enocder(x))
        loss = F.cross_entropy(net.head(hidden), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def train_encoded_fixed(net, optimizer, x, y, epochs):
    losses = []
    for _epoch in range(epochs):
        optimizer.zero_grad()
        hidden = torch.relu(net.encoder(x))
        loss = F.cross_entropy(net.head(hidden), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_a_misspelt_layer_is_the_layer_the_module_holds() -> None:
    """Proposed, and right; not applied unattended: the allowlist admits only the callees the function
    calls itself, and `net.encoder` is not one (a person approves it, `approve="ask"`)."""
    x, y = data()
    net = Encoded()
    found, _ = generate(report(train_encoded, net, torch.optim.Adam(net.parameters(), lr=0.01), x, y, 3))
    (candidate,) = [c for c in found if c.family == "lookups"]
    namespace = dict(train_encoded.__globals__)
    exec(compile(textwrap.dedent(candidate.code), __file__, "exec"), namespace)
    repaired_net, fixed_net = Encoded(), Encoded()
    losses = namespace["train_encoded"](repaired_net, torch.optim.Adam(repaired_net.parameters(), lr=0.01), x, y, 3)
    assert losses == train_encoded_fixed(fixed_net, torch.optim.Adam(fixed_net.parameters(), lr=0.01), x, y, 3)
    assert "net.encoder(x)" in candidate.code and same(repaired_net, fixed_net)


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(5, 5)
        self.fc3 = nn.Linear(5, 3)


def second_layer(net, x):
    return net.fc2(x)


def typo_layer(net, x):
    return net.fc_3(x)


def test_a_layer_named_by_another_number_is_no_typo() -> None:
    assert generated_lines(typo_layer, TwoHeads(), torch.randn(2, 5)) == [["return net.fc3(x)"]]
    assert generated_lines(second_layer, TwoHeads(), torch.randn(2, 5)) == []  # fc1 or fc3: neither is fc2


def count_samples(batches):
    seen = 0
    for _xb, labels in batches:  # noqa: B007 - `labels` is what the typo below meant
        seen += len(labls)  # noqa: F821 - the bug under test
    return seen


def test_a_misspelt_name_is_the_local_it_resembles(automatic) -> None:
    x, y = data()
    batches = list(zip(x.split(10), y.split(10)))
    assert daifu.transform(fresh(count_samples))(batches) == 32
    (line,) = repaired(automatic(), "NameError", count_samples)
    assert line.startswith("seen += len(labels)  #")


# -- an index one past the end ---------------------------------------------------------------------------


def train_with_warmup(model, optimizer, x, y, epochs, warmup, used):
    for _epoch in range(epochs):
        lr = warmup[_epoch]
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        used.append(lr)


def train_with_warmup_fixed(model, optimizer, x, y, epochs, warmup, used):
    for _epoch in range(epochs):
        lr = warmup[min(_epoch, len(warmup) - 1)]
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        used.append(lr)


def test_an_index_past_a_schedule_keeps_to_its_last_setting(automatic) -> None:
    x, y = data()
    model, optimizer = classifier()
    used: list[float] = []
    daifu.transform(fresh(train_with_warmup))(model, optimizer, x, y, 5, [0.02, 0.05, 0.1], used)

    assert repaired(automatic(), "IndexError", train_with_warmup) == ["lr = warmup[min(_epoch, len(warmup) - 1)]"]
    fixed_model, fixed_optimizer = classifier()
    fixed: list[float] = []
    train_with_warmup_fixed(fixed_model, fixed_optimizer, x, y, 5, [0.02, 0.05, 0.1], fixed)
    assert used == fixed == [0.02, 0.05, 0.1, 0.1, 0.1] and same(model, fixed_model)


def next_batch(batches, step):
    xb = batches[step]
    return xb.sum()


def test_an_index_is_clamped_into_a_schedule_never_into_the_data() -> None:
    assert generated_lines(next_batch, [0.1, 0.2], 2) == [["xb = batches[min(step, len(batches) - 1)]"]]
    assert generated_lines(next_batch, [torch.ones(2), torch.zeros(2)], 2) == []  # a batch would be trained twice


# -- a metric over nothing ---------------------------------------------------------------------------------


def train_and_validate(model, optimizer, x, y, val_batches, epochs, history):
    for _epoch in range(epochs):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        correct, seen = 0, 0
        with torch.no_grad():
            for xb, yb in val_batches:
                correct += int((model(xb).argmax(dim=1) == yb).sum())
                seen += len(yb)
        val_acc = correct / seen
        history.append(round(val_acc, 4))


def train_and_validate_fixed(model, optimizer, x, y, val_batches, epochs, history):
    for _epoch in range(epochs):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        correct, seen = 0, 0
        with torch.no_grad():
            for xb, yb in val_batches:
                correct += int((model(xb).argmax(dim=1) == yb).sum())
                seen += len(yb)
        val_acc = correct / seen if seen else 0.0
        history.append(round(val_acc, 4))


def test_a_metric_over_an_empty_validation_set_reports_zero(automatic) -> None:
    x, y = data()
    model, optimizer = classifier()
    history: list[float] = []
    daifu.transform(fresh(train_and_validate))(model, optimizer, x, y, [], 3, history)

    guarded = "val_acc = correct / seen if seen else 0.0"
    assert repaired(automatic(), "ZeroDivisionError", train_and_validate) == [guarded]
    fixed_model, fixed_optimizer = classifier()
    fixed: list[float] = []
    train_and_validate_fixed(fixed_model, fixed_optimizer, x, y, [], 3, fixed)
    assert history == fixed == [0.0, 0.0, 0.0] and same(model, fixed_model)


def accumulate(model, x, y, micro_batches):
    scale = 1.0 / micro_batches
    for p in model.parameters():
        p.grad.mul_(scale)


def test_a_quotient_the_training_reads_is_never_guarded() -> None:
    model, _ = classifier()
    F.cross_entropy(model(data()[0]), data()[1]).backward()
    assert generated_lines(accumulate, model, *data(), 0) == []
    empty: list[float] = []
    assert generated_lines(train_and_validate, *classifier(), *data(), [], 1, empty) == [
        ["val_acc = correct / seen if seen else 0.0"]]


# -- `.item()` on many elements, `None` among the tensors to join ------------------------------------------------


def train_counting_hits(model, optimizer, x, y, epochs, hits):
    for _epoch in range(epochs):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        with torch.no_grad():
            predicted = model(x).argmax(dim=1)
        hits.append((predicted == y).item())


def test_item_of_a_comparison_counts_the_hits(automatic) -> None:
    x, y = data()
    model, optimizer = classifier()
    hits: list[int] = []
    daifu.transform(fresh(train_counting_hits))(model, optimizer, x, y, 3, hits)

    assert repaired(automatic(), "RuntimeError", train_counting_hits) == ["hits.append((predicted == y).sum().item())"]
    fixed_model, fixed_optimizer = classifier()
    fixed = []
    for _epoch in range(3):
        fixed_optimizer.zero_grad()
        F.cross_entropy(fixed_model(x), y).backward()
        fixed_optimizer.step()
        with torch.no_grad():
            fixed.append((fixed_model(x).argmax(dim=1) == y).sum().item())
    assert hits == fixed and same(model, fixed_model)


def fit_regression(model, optimizer, x, target, epochs, errors):
    for _epoch in range(epochs):
        optimizer.zero_grad()
        F.mse_loss(model(x), target).backward()
        optimizer.step()
        with torch.no_grad():
            per_sample = (model(x) - target).pow(2).mean(dim=1)
        errors.append(round(per_sample.item(), 6))


def test_item_of_a_value_per_sample_takes_their_mean(automatic) -> None:
    x, _ = data()
    target = x[:, :2] * 0.5
    torch.manual_seed(11)
    model = nn.Linear(5, 2)
    errors: list[float] = []
    daifu.transform(fresh(fit_regression))(model, torch.optim.SGD(model.parameters(), lr=0.1), x, target, 3, errors)

    mean = "errors.append(round(per_sample.mean().item(), 6))"
    assert repaired(automatic(), "RuntimeError", fit_regression) == [mean]
    torch.manual_seed(11)
    fixed_model = nn.Linear(5, 2)
    fixed_optimizer = torch.optim.SGD(fixed_model.parameters(), lr=0.1)
    fixed = []
    for _epoch in range(3):
        fixed_optimizer.zero_grad()
        F.mse_loss(fixed_model(x), target).backward()
        fixed_optimizer.step()
        with torch.no_grad():
            fixed.append(round((fixed_model(x) - target).pow(2).mean(dim=1).mean().item(), 6))
    assert errors == fixed and same(model, fixed_model)


def train_collecting_features(model, optimizer, batches, bank):
    features = None
    for xb, yb in batches:
        optimizer.zero_grad()
        F.cross_entropy(model(xb), yb).backward()
        optimizer.step()
        with torch.no_grad():
            out = model[0](xb)
        features = torch.cat([features, out])
    bank.append(features)


def test_cat_of_a_list_that_starts_with_none_joins_the_tensors(automatic) -> None:
    x, y = data()
    batches = list(zip(x.split(8), y.split(8)))
    model, optimizer = classifier()
    bank: list[Any] = []
    daifu.transform(fresh(train_collecting_features))(model, optimizer, batches, bank)

    assert repaired(automatic(), "TypeError", train_collecting_features) == [
        "features = torch.cat([t for t in [features, out] if t is not None])"]
    fixed_model, fixed_optimizer = classifier()
    features = None
    for xb, yb in batches:
        fixed_optimizer.zero_grad()
        F.cross_entropy(fixed_model(xb), yb).backward()
        fixed_optimizer.step()
        with torch.no_grad():
            out = fixed_model[0](xb)
        features = out if features is None else torch.cat([features, out])
    assert torch.equal(bank[0], features) and bank[0].shape == (32, 8) and same(model, fixed_model)


# -- a parameter changed in place under autograd -------------------------------------------------------------


def train_with_clipped_weights(model, optimizer, x, y, epochs, bound):
    for _epoch in range(epochs):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        model[0].weight.clamp_(-bound, bound)


def test_a_weight_clipped_in_place_is_clipped_without_grad(automatic) -> None:
    x, y = data()
    model, optimizer = classifier()
    daifu.transform(fresh(train_with_clipped_weights))(model, optimizer, x, y, 4, 0.05)

    assert repaired(automatic(), "RuntimeError", train_with_clipped_weights) == ["with torch.no_grad():"]
    fixed_model, fixed_optimizer = classifier()
    for _epoch in range(4):
        fixed_optimizer.zero_grad()
        F.cross_entropy(fixed_model(x), y).backward()
        fixed_optimizer.step()
        with torch.no_grad():
            fixed_model[0].weight.clamp_(-0.05, 0.05)
    assert same(model, fixed_model) and float(model[0].weight.detach().abs().max()) <= 0.05 + 1e-6


def sgd_by_hand(w, b, x, target, epochs, lr):
    for _epoch in range(epochs):
        loss = ((x @ w + b - target) ** 2).mean()
        loss.backward()
        w -= lr * w.grad
        b -= lr * b.grad
        w.grad.zero_()
        b.grad.zero_()
    return float(loss)


def test_a_step_by_hand_is_made_without_grad(automatic) -> None:
    x, _ = data()
    target = x[:, :1] * 2.0 - 1.0
    w, b = torch.zeros(5, 1, requires_grad=True), torch.zeros(1, requires_grad=True)
    last = daifu.transform(fresh(sgd_by_hand))(w, b, x, target, 5, 0.1)

    repairs = automatic()
    assert repaired(repairs, "RuntimeError", sgd_by_hand) == ["with torch.no_grad():"]
    block = "with torch.no_grad():\n            w -= lr * w.grad\n            b -= lr * b.grad\n        w.grad"
    assert block in repairs[0]["code"]  # both steps, or b's would raise next
    fixed_w, fixed_b = torch.zeros(5, 1, requires_grad=True), torch.zeros(1, requires_grad=True)
    for _epoch in range(5):
        loss = ((x @ fixed_w + fixed_b - target) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            fixed_w -= 0.1 * fixed_w.grad
            fixed_b -= 0.1 * fixed_b.grad
        fixed_w.grad.zero_()
        fixed_b.grad.zero_()
    assert torch.equal(w, fixed_w) and torch.equal(b, fixed_b) and last == float(loss)


# -- the report: the live object a lookup failed on --------------------------------------------------------------


class Settings:
    def __init__(self) -> None:
        self.warmup_steps = 10
        self.api_token = "hunter2-secret-value-123456"


def read_setting(settings):
    return settings.warmup_step * 2


def test_the_report_names_the_object_looked_in_and_what_it_holds() -> None:
    keyed = report(append_accuracy, {"acc_val": 0.75, "loss": 0.3}, [0.5]).lookups
    assert [(k.kind, k.expression, k.wanted, k.length, k.names[0], k.kinds["'acc_val'"]) for k in keyed] == [
        ("key", "metrics", "'val_acc'", 2, "'acc_val'", "float")]
    (attribute,) = report(read_setting, Settings()).lookups
    assert (attribute.kind, attribute.expression, attribute.wanted, attribute.names[0]) == (
        "attribute", "settings", "warmup_step", "warmup_steps")
    assert attribute.kinds["warmup_steps"] == "int" and "hunter2" not in attribute.model_dump_json()


def describe_epoch(stats):
    return "accuracy {val_acc:.3f} loss {loss:.3f}".format(**stats)


def train_describing(log):
    for epoch in range(2):
        stats = {"acc_val": 0.5 + epoch / 4, "loss": 1.0 - epoch / 4}
        log.append(describe_epoch(stats))


def test_a_lookup_that_fails_in_a_callee_is_repaired_there() -> None:
    found, _ = generate(report(train_describing, []))
    (candidate,) = [c for c in found if c.family == "lookups"]
    assert (candidate.kind, candidate.target) == ("patch_function", "sys.modules['tests.test_lookups'].describe_epoch")
    namespace: dict[str, Any] = {}
    exec(compile(textwrap.dedent(candidate.code), __file__, "exec"), namespace)
    assert namespace["describe_epoch"]({"acc_val": 0.75, "loss": 0.25}) == "accuracy 0.750 loss 0.250"
