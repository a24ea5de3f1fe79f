"""The rules engine on real crashes: each proposed repair, applied, makes the crash go away."""

# ruff: noqa: E402
from __future__ import annotations

import re

import os
from pathlib import Path

import pytest

pytest.importorskip("pydantic")

from tests.botfixtures import crash_from, run_action_then_statement, surgery_function
from daifu.core.patch import patch_function, resolve
from daifu.report.build import build_report
from repairbot.protocol import Suggestion
from repairbot.rules import analyse

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional


def suggestions_for(fn, *args):
    crash = crash_from(fn, *args)
    diagnosis, suggestions = analyse(build_report(crash))
    return crash, diagnosis, suggestions


def first(suggestions: list[Suggestion], kind: str) -> Suggestion:
    found = [s for s in suggestions if s.kind == kind]
    assert found, f"no {kind} among {[s.kind for s in suggestions]}"
    return found[0]


def halves(xs):
    n = len(xs) / 2
    return xs[:n]


def test_float_index_gets_int_surgery() -> None:
    _, diagnosis, suggestions = suggestions_for(halves, [1, 2, 3, 4])
    assert diagnosis.category == "api_misuse"
    assert surgery_function(first(suggestions, "surgery"), halves)([1, 2, 3, 4]) == [1, 2]


def float_size():
    rows = 6
    return torch.zeros((rows / 2, 3))


@pytest.mark.torch
def test_float_size_gets_floor_division() -> None:
    _, _, suggestions = suggestions_for(float_size)
    surgery = first(suggestions, "surgery")
    assert "rows // 2" in surgery.code or "int(rows / 2)" in surgery.code
    assert surgery_function(surgery, float_size)().shape == (3, 3)


def to_numpy():
    weights = torch.ones(3, requires_grad=True)
    values = (weights * 2).numpy()
    return values


@pytest.mark.torch
def test_numpy_on_graph_tensor_gets_detach() -> None:
    pytest.importorskip("numpy")
    _, _, suggestions = suggestions_for(to_numpy)
    surgery = first(suggestions, "surgery")
    assert "(weights * 2).detach().numpy()" in surgery.code
    assert list(surgery_function(surgery, to_numpy)()) == [2.0, 2.0, 2.0]


def view_transposed():
    grid = torch.arange(12.0).reshape(3, 4).t()
    flat = grid.view(12)
    return flat


@pytest.mark.torch
def test_view_on_non_contiguous_gets_reshape() -> None:
    _, _, suggestions = suggestions_for(view_transposed)
    assert [s.kind for s in suggestions] == ["surgery", "surgery"]
    for surgery in suggestions:
        assert surgery_function(surgery, view_transposed)().shape == (12,)


def linear_too_small():
    model = nn.Sequential(nn.Linear(20, 5), nn.ReLU())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 10)
    out = model(x)
    return out, optimizer


@pytest.mark.torch
def test_linear_mismatch_rebuilds_the_layer() -> None:
    crash, diagnosis, suggestions = suggestions_for(linear_too_small)
    assert diagnosis.category == "tensor_mismatch"
    action = first(suggestions, "action")
    assert "model[0] = torch.nn.Linear(10, 5)" in action.code
    namespace = run_action_then_statement(action, crash, linear_too_small)
    assert namespace["out"].shape == (4, 5)
    assert len(namespace["optimizer"].param_groups) == 2


@pytest.mark.torch
def test_linear_mismatch_surgery_builds_the_layer_for_the_input() -> None:
    _, _, suggestions = suggestions_for(linear_too_small)
    surgery = first(suggestions, "surgery")
    out, _ = surgery_function(surgery, linear_too_small)()
    assert out.shape == (4, 5)


def image_into_linear():
    head = nn.Linear(16, 3)
    images = torch.randn(4, 1, 4, 4)
    logits = head(images)
    return logits


@pytest.mark.torch
def test_unflattened_input_gets_flatten() -> None:
    _, _, suggestions = suggestions_for(image_into_linear)
    assert suggestions[0].kind == "surgery" and "head(images.flatten(1))" in suggestions[0].code
    assert all(s.kind == "surgery" for s in suggestions)  # no layer rebuilt for the wrong size
    assert surgery_function(suggestions[0], image_into_linear)().shape == (4, 3)


def double_input():
    layer = nn.Linear(3, 2)
    batch = torch.randn(4, 3, dtype=torch.float64)
    return layer(batch)


@pytest.mark.torch
def test_double_input_gets_float() -> None:
    _, _, suggestions = suggestions_for(double_input)
    surgery = first(suggestions, "surgery")
    assert ".float()" in surgery.code  # where the batch is made, or where it is used
    assert surgery_function(surgery, double_input)().dtype == torch.float32


def wrong_device():
    model = nn.Linear(3, 2).to("meta")
    inputs = torch.randn(4, 3)
    return model(inputs)


@pytest.mark.torch
def test_device_mismatch_moves_the_input() -> None:
    _, diagnosis, suggestions = suggestions_for(wrong_device)
    assert diagnosis.category == "tensor_mismatch"
    result = surgery_function(first(suggestions, "surgery"), wrong_device)()
    assert result.device.type == "meta" and result.shape == (4, 2)


def float_targets():
    logits = torch.randn(4, 3)
    labels = torch.tensor([0.0, 1.0, 2.0, 1.0])
    loss = F.cross_entropy(logits, labels)
    return loss


def column_targets():
    logits = torch.randn(4, 3)
    labels = torch.tensor([[0], [1], [2], [1]])
    loss = F.cross_entropy(logits, labels)
    return loss


@pytest.mark.torch
@pytest.mark.parametrize("fn, fix", [(float_targets, "labels.long()"), (column_targets, "labels.squeeze(1)")])
def test_loss_target_gets_fixed(fn, fix) -> None:
    _, _, suggestions = suggestions_for(fn)
    surgery = first(suggestions, "surgery")
    assert fix in surgery.code
    assert surgery_function(surgery, fn)().ndim == 0


def mismatched_sum():
    a = torch.ones(2, 6)
    b = torch.ones(3, 4)
    return a + b


@pytest.mark.torch
def test_broadcast_mismatch_with_equal_sizes_gets_reshape() -> None:
    _, _, suggestions = suggestions_for(mismatched_sum)
    assert surgery_function(suggestions[0], mismatched_sum)().shape in {(3, 4), (2, 6)}


def save_checkpoint(folder):
    model = nn.Linear(2, 2)
    target = os.path.join(folder, "run1", "model.pt")
    torch.save(model.state_dict(), target)
    return target


@pytest.mark.torch
def test_save_into_missing_folder_makes_it(tmp_path: Path) -> None:
    crash, diagnosis, suggestions = suggestions_for(save_checkpoint, str(tmp_path))
    assert diagnosis.category == "path"
    run_action_then_statement(first(suggestions, "action"), crash, save_checkpoint)
    assert (tmp_path / "run1" / "model.pt").exists()


def load_checkpoint(folder):
    checkpoint_path = Path(folder) / "modle.pt"
    state = torch.load(checkpoint_path)
    return state


@pytest.mark.torch
def test_mistyped_path_is_rebound_to_the_closest_file(tmp_path: Path) -> None:
    torch.save({"w": 1}, tmp_path / "model.pt")
    (tmp_path / "unrelated.txt").write_text("x")
    crash, _, suggestions = suggestions_for(load_checkpoint, str(tmp_path))
    action = first(suggestions, "action")
    assert "model.pt" in action.code
    assert run_action_then_statement(action, crash, load_checkpoint)["state"] == {"w": 1}


def train_with_nan_guard(batches):
    total = 0.0
    for batch in batches:
        loss = batch.mean()
        if torch.isnan(loss):
            raise ValueError("loss is nan")
        total += float(loss)
    return total


@pytest.mark.torch
def test_nan_guard_becomes_continue() -> None:
    batches = [torch.ones(2), torch.tensor([float("nan"), 1.0]), torch.full((2,), 3.0)]
    _, diagnosis, suggestions = suggestions_for(train_with_nan_guard, batches)
    assert diagnosis.category == "exceptional_data"
    kinds = [s.kind for s in suggestions]  # the edit first, then what skips work, the least first
    assert kinds[0] == "surgery" and kinds.index("skip_iteration") < kinds.index("skip")
    assert surgery_function(suggestions[0], train_with_nan_guard)(batches) == 4.0


def memory_limited_step(loader):
    model = nn.Linear(3, 1)
    for inputs in loader:
        out = capped_forward(model, inputs)
    return out


def capped_forward(model, inputs):
    if inputs.shape[0] > 4:  # stands for a GPU that only fits four samples
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    return model(inputs)


@pytest.mark.torch
def test_out_of_memory_halves_the_batch_and_the_loader() -> None:
    loader = torch.utils.data.DataLoader(torch.randn(16, 3), batch_size=8, shuffle=True)
    crash, diagnosis, suggestions = suggestions_for(memory_limited_step, loader)
    assert diagnosis.category == "out_of_memory"
    # the halving leaves half of this batch out: it ranks after the empty cache, which gives nothing up
    action = next(s for s in suggestions if s.kind == "action" and "batch_size // 2" in s.code)
    assert "torch.cuda.empty_cache()" in action.code  # the message speaks of CUDA
    if not torch.cuda.is_available():
        action = action.model_copy(update={"code": action.code.replace("torch.cuda.empty_cache()", "")})
    namespace = run_action_then_statement(action, crash, memory_limited_step)
    assert namespace["loader"].batch_size == 4 and namespace["out"].shape == (4, 1)
    assert isinstance(namespace["loader"].sampler, torch.utils.data.RandomSampler)


def busy_device():
    raise RuntimeError("CUDA error: all CUDA-capable devices are busy or unavailable")


def test_busy_device_waits_then_retries() -> None:
    _, diagnosis, suggestions = suggestions_for(busy_device)
    assert diagnosis.category == "out_of_memory"
    # at once first, then waits of growing length: the client tries each on a copy of the run, in this order
    assert suggestions[0].kind == "retry" and suggestions[1].kind == "action"
    waits = [float(m) for s in suggestions[1:] for m in re.findall(r"sleep\(([\d.]+)\)", s.code)]
    assert waits[:4] == sorted(waits[:4]) and 10 in waits


def flaky_read(source):
    data = source.read()
    return data


class FlakySource:
    def read(self) -> bytes:
        raise ConnectionResetError("Connection reset by peer")


def test_transient_error_gets_bounded_retries_with_back_off() -> None:
    crash = crash_from(flaky_read, FlakySource())
    _, first_answer = analyse(build_report(crash))
    assert [s.kind for s in first_answer][:2] == ["retry", "action"] and "sleep(1)" in first_answer[-1].code
    crash.tried.extend([("Retry()", "raised again")] * 3)
    assert "sleep(8)" in analyse(build_report(crash))[1][-1].code  # the rules' back-off grows with the tries
    crash.tried.extend([("Retry()", "raised again")] * 2)
    diagnosis, suggestions = analyse(build_report(crash))
    assert suggestions == [] and "likely not transient" in diagnosis.explanation


def head_of(items, count):
    return items[:count]


def take_half(items):
    size = len(items) / 2
    first_half = head_of(items, size)
    return first_half


def test_fault_in_a_callee_patches_the_callee() -> None:
    crash, diagnosis, suggestions = suggestions_for(take_half, [1, 2, 3, 4])
    assert diagnosis.culprit.function == "head_of"
    patch = first(suggestions, "patch_function")
    assert "items[:int(count)]" in patch.code and patch.target == f"sys.modules[{__name__!r}].head_of"
    original = head_of.__code__
    try:
        patch_function(resolve(patch.target), patch.code)
        assert take_half([1, 2, 3, 4]) == [1, 2]
    finally:
        head_of.__code__ = original


def unknown_failure():
    raise KeyError("something nobody anticipated")


def test_unknown_crash_gets_a_diagnosis_and_no_suggestion() -> None:
    _, diagnosis, suggestions = suggestions_for(unknown_failure)
    assert diagnosis.category == "unknown" and suggestions == []
    assert "KeyError" in diagnosis.explanation
