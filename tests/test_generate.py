"""The candidate generator on real crashes: each family's edit, applied, makes the crash go away.

Every test runs a small function that really crashes, describes the crash as the runtime does
(`tests.botfixtures.crash_from`, `daifu.report.build.build_report`) and asks the offline engine
(`repairbot.rules.analyse`, which ranks the rules' suggestions with the generated candidates). The
edit is then compiled and run: a candidate is judged by what it does, not by its text alone.
"""

from __future__ import annotations

import inspect
import textwrap

import pytest

from tests.extras import BOT

for _package in (*BOT, 'torch'):
    pytest.importorskip(_package)

from daifu.report.build import build_report
from repairbot.generate import generate, rank
from repairbot.generate.candidate import GeneratedRepair
from repairbot.generate.view import View, sites
from repairbot.protocol import Suggestion
from repairbot.rules import analyse
from tests.botfixtures import crash_from, run_action_then_statement, surgery_function

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
nn = torch.nn
F = torch.nn.functional

pytestmark = pytest.mark.torch

from tests.small_device import SmallDevice  # noqa: E402


def answer(fn, *args) -> list[Suggestion]:
    _, suggestions = analyse(build_report(crash_from(fn, *args)))
    assert suggestions, fn.__name__
    return suggestions


def generated(fn, *args) -> list[GeneratedRepair]:
    """The generated candidates alone (no rules), unranked."""
    found, _ = generate(build_report(crash_from(fn, *args)))
    return found


def changed_lines(suggestion: Suggestion, fn) -> list[str]:
    """The lines a surgery changes or adds, stripped."""
    old = {line.strip() for line in inspect.getsource(fn).splitlines()}
    return [line.strip() for line in suggestion.code.splitlines() if line.strip() not in old]


def first_surgery_with(suggestions: list[Suggestion], fn, text: str) -> Suggestion:
    found = [s for s in suggestions if s.kind == "surgery" and any(text in line for line in changed_lines(s, fn))]
    assert found, [changed_lines(s, fn) for s in suggestions if s.kind == "surgery"]
    return found[0]


# -- numbers ----------------------------------------------------------------------------------------


def narrow_by_a_float(data):
    for _ in range(2):
        rows = data.size(0) / 10
        streams = data.narrow(0, 0, rows * 10).view(10, -1)
    return streams


def test_a_float_size_is_floored_where_it_is_computed() -> None:
    suggestions = answer(narrow_by_a_float, torch.arange(163.0))
    floor = first_surgery_with(suggestions, narrow_by_a_float, "rows = data.size(0) // 10")
    assert surgery_function(floor, narrow_by_a_float)(torch.arange(163.0)).shape == (10, 16)
    # PyTorch's argument parser named argument 3: `int(...)` there is proposed too, and fails (163 rows do not
    # make 10 streams) where the floor division works; the trial is what tells them apart.
    at_call = first_surgery_with(suggestions, narrow_by_a_float, "int(rows * 10)")
    with pytest.raises(RuntimeError):
        surgery_function(at_call, narrow_by_a_float)(torch.arange(163.0))


def random_corners(steps):
    corners = []
    for step in range(steps):
        top, left = torch.randint(0, 20, 2, generator=torch.Generator().manual_seed(step)).tolist()
        corners.append((top, left))
    return corners


def test_an_int_where_a_size_tuple_belongs_becomes_a_tuple() -> None:
    suggestions = answer(random_corners, 2)
    assert suggestions[0].kind == "surgery"
    assert changed_lines(suggestions[0], random_corners)[0].startswith("top, left = torch.randint(0, 20, (2,),")
    assert len(surgery_function(suggestions[0], random_corners)(3)) == 3


# -- structure --------------------------------------------------------------------------------------


def accuracy_of(logits, labels):
    for _ in range(2):
        predicted = logits.max(dim=1)
        accuracy = (predicted == labels).float().mean().item()
    return accuracy


def test_a_tuple_compared_with_labels_gives_the_item_of_their_dtype() -> None:
    logits = torch.tensor([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]])
    labels = torch.tensor([1, 0, 0])
    suggestions = answer(accuracy_of, logits, labels)
    best = suggestions[0]
    assert changed_lines(best, accuracy_of) in (["predicted = logits.max(dim=1)[1]"],
                                                 ["accuracy = (predicted[1] == labels).float().mean().item()"])
    assert surgery_function(best, accuracy_of)(logits, labels) == pytest.approx(2 / 3)
    values = [s for s in suggestions if any("[0]" in line for line in changed_lines(s, accuracy_of))]
    assert values and all(suggestions.index(v) > suggestions.index(best) for v in values)  # float32 values: later


def clip(model, steps):
    for _ in range(steps):
        norm = torch.nn.utils.clip_grad_norm_(model, 1.0)
    return norm


def test_a_module_where_its_parameters_belong() -> None:
    model = nn.Linear(3, 2)
    model(torch.randn(4, 3)).sum().backward()
    best = answer(clip, model, 2)[0]
    assert changed_lines(best, clip) == ["norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"]
    assert float(surgery_function(best, clip)(model, 2)) > 0


def decay(optimizer, steps):
    for _ in range(steps):
        optimizer.param_groups["lr"] /= 4.0
    return [g["lr"] for g in optimizer.param_groups]


def test_a_key_set_on_a_list_of_dicts_is_set_in_every_item() -> None:
    model = nn.Linear(2, 2)
    optimizer = torch.optim.SGD([{"params": [model.weight]}, {"params": [model.bias], "lr": 0.4}], lr=0.8)
    best = answer(decay, optimizer, 1)[0]
    assert changed_lines(best, decay) == ["for group in optimizer.param_groups:", 'group["lr"] /= 4.0']
    assert surgery_function(best, decay)(optimizer, 1) == [0.2, 0.1]


# -- dtypes -----------------------------------------------------------------------------------------


def evaluate_with_numpy_state(model, x):
    for _ in range(2):
        state = tuple(torch.from_numpy(np.zeros((1, 3, 4))) for _ in range(2))
        out, _ = model(x, state)
    return out


def test_a_float64_state_into_a_float32_lstm_is_converted_to_the_modules_dtype() -> None:
    lstm = nn.LSTM(5, 4)
    x = torch.randn(2, 3, 5)
    best = answer(evaluate_with_numpy_state, lstm, x)[0]
    assert changed_lines(best, evaluate_with_numpy_state) == ["out, _ = model(x, tuple(t.float() for t in state))"]
    assert surgery_function(best, evaluate_with_numpy_state)(lstm, x).dtype == torch.float32


def float64_batch_into_a_layer(layer, arrays):
    outputs = []
    for array in arrays:
        batch = torch.from_numpy(array)
        outputs.append(layer(batch))
    return outputs


def test_float64_data_into_a_float32_layer_is_converted_where_it_is_computed() -> None:
    layer = nn.Linear(3, 2)
    arrays = [np.ones((4, 3)), np.zeros((2, 3))]
    suggestions = answer(float64_batch_into_a_layer, layer, arrays)
    at_source = first_surgery_with(suggestions, float64_batch_into_a_layer, "batch = torch.from_numpy(array).float()")
    assert [o.shape for o in surgery_function(at_source, float64_batch_into_a_layer)(layer, arrays)] == [(4, 2), (2, 2)]


# -- shapes -----------------------------------------------------------------------------------------


def sequence_loss(output, targets):
    for _ in range(2):
        loss = F.cross_entropy(output, targets)
    return loss


def test_leading_dimensions_are_flattened_to_the_targets_length() -> None:
    output, targets = torch.randn(5, 4, 7), torch.randint(0, 7, (20,))
    best = answer(sequence_loss, output, targets)[0]
    assert changed_lines(best, sequence_loss) == ["loss = F.cross_entropy(output.flatten(0, -2), targets)"]
    assert torch.equal(surgery_function(best, sequence_loss)(output, targets),
                       F.cross_entropy(output.reshape(20, 7), targets))


def predict_one(model, x, samples):
    for _ in range(2):
        logits = model(x)
        sample = model(samples[0]).argmax(-1)
    return logits, sample


def test_a_sample_given_where_a_batch_goes_gets_its_batch_dimension() -> None:
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 2))
    x, samples = torch.randn(8, 3, 4), torch.randn(5, 3, 4)
    best = answer(predict_one, model, x, samples)[0]
    assert changed_lines(best, predict_one) == ["sample = model(samples[0].unsqueeze(0)).argmax(-1)"]
    assert surgery_function(best, predict_one)(model, x, samples)[1].shape == (1,)


def weighted_losses(model, x_all, y_all):
    weights = torch.ones(8)
    losses = []
    for start in range(0, len(x_all), 8):
        x, y = x_all[start : start + 8], y_all[start : start + 8]
        per_sample = F.cross_entropy(model(x), y, reduction="none")
        losses.append((per_sample * weights).mean())
    return losses


def test_a_buffer_made_for_full_batches_is_cut_to_a_last_smaller_one_and_says_so() -> None:
    model = nn.Linear(3, 2)
    x_all, y_all = torch.randn(13, 3), torch.randint(0, 2, (13,))
    suggestions = answer(weighted_losses, model, x_all, y_all)
    cut = first_surgery_with(suggestions, weighted_losses, "weights[: len(per_sample)]")
    assert "drops the elements" in cut.explanation and cut.confidence <= 0.3
    assert len(surgery_function(cut, weighted_losses)(model, x_all, y_all)) == 2


def streams_of(data):
    for _ in range(2):
        flat = data.t().view(-1)
    return flat


def test_view_of_a_transposed_tensor_becomes_reshape() -> None:
    best = answer(streams_of, torch.arange(12.0).reshape(3, 4))[0]
    assert changed_lines(best, streams_of) == ["flat = data.t().reshape(-1)"]


# -- graph ------------------------------------------------------------------------------------------


def recurrent_training(model, batches):
    hidden = (torch.zeros(1, 3, 4), torch.zeros(1, 3, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x in batches:
        output, hidden = model(x, hidden)
        loss = output.pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_state_carried_across_iterations_is_detached_where_the_iteration_reads_it() -> None:
    torch.manual_seed(0)
    batches = [torch.randn(2, 3, 5) for _ in range(3)]
    best = answer(recurrent_training, nn.LSTM(5, 4), batches)[0]
    assert changed_lines(best, recurrent_training) == ["hidden = tuple(t.detach() for t in hidden)"]
    lines = [line.strip() for line in best.code.splitlines()]
    assert lines.index("hidden = tuple(t.detach() for t in hidden)") + 1 == lines.index(
        "output, hidden = model(x, hidden)")
    assert len(surgery_function(best, recurrent_training)(nn.LSTM(5, 4), batches)) == 3


# -- constraints ------------------------------------------------------------------------------------


def sample_actions(scores, steps):
    from torch.distributions import Categorical

    actions = []
    for _ in range(steps):
        policy = Categorical(scores)
        actions.append(policy.sample())
    return actions


def test_scores_given_as_probabilities_become_logits() -> None:
    suggestions = answer(sample_actions, torch.tensor([1.5, -0.5]), 2)
    assert changed_lines(suggestions[0], sample_actions) == ["policy = Categorical(logits=scores)"]
    assert len(surgery_function(suggestions[0], sample_actions)(torch.tensor([1.5, -0.5]), 3)) == 3
    softmax = first_surgery_with(suggestions, sample_actions, "Categorical(scores.softmax(-1))")
    assert len(surgery_function(softmax, sample_actions)(torch.tensor([1.5, -0.5]), 2)) == 2


# -- memory -----------------------------------------------------------------------------------------


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 3)

    def forward(self, x):
        return self.body(x).softmax(-1), self.body(x).sum(-1)


def one_output(model, x, y):
    torch.manual_seed(0)
    for _ in range(2):
        loss = F.cross_entropy(model(x), y)
    return loss


def two_outputs(model, states):
    torch.manual_seed(0)
    for _ in range(2):
        probs, values = model(states)
    return probs, values


def recurrent(model, x, hidden):
    torch.manual_seed(0)
    for _ in range(2):
        output, hidden = model(x, hidden)
    return output, hidden


def test_out_of_memory_reruns_the_call_on_chunks_with_the_same_result() -> None:
    linear, heads, lstm = nn.Linear(12, 3), TwoHeads(), nn.LSTM(5, 4)
    x, y, states = torch.randn(64, 12), torch.randint(0, 3, (64,)), torch.randn(70, 4)
    sequence, hidden = torch.randn(40, 3, 5), (torch.zeros(1, 3, 4), torch.zeros(1, 3, 4))
    cases = [
        (one_output, (SmallDevice(linear, 20), x, y), one_output(linear, x, y)),
        (two_outputs, (SmallDevice(heads, 20), states), two_outputs(heads, states)),
        (recurrent, (SmallDevice(lstm, 15), sequence, hidden), recurrent(lstm, sequence, hidden)),
    ]
    for fn, args, expected in cases:
        suggestions = answer(fn, *args)
        chunked = [s for s in suggestions if s.kind == "surgery"]
        assert len(chunked) == 3 and all(".split(" in s.code for s in chunked), fn.__name__
        results = []
        for suggestion in chunked:  # halves, quarters, eighths: the first that fits on the device is the repair
            try:
                results.append(surgery_function(suggestion, fn)(*args))
            except torch.OutOfMemoryError:
                continue
        assert results, fn.__name__
        got = results[0]
        for a, b in zip(got if isinstance(got, tuple) else (got,), expected if isinstance(expected, tuple) else (expected,)):
            if isinstance(a, tuple):
                assert all(torch.allclose(p, q, atol=1e-6) for p, q in zip(a, b))
            else:
                assert torch.allclose(a, b, atol=1e-6), fn.__name__


def test_memory_held_by_another_process_is_waited_for_not_chunked() -> None:
    def held(model, x):
        torch.manual_seed(0)
        for _ in range(2):
            out = model(x)
        return out

    error = ("CUDA out of memory. Tried to allocate 2.00 GiB. Process 4242 has 14.90 GiB memory in use. Including "
             "non-PyTorch memory, this process has 312.00 MiB memory in use.")

    class Held(nn.Module):
        def forward(self, x):
            raise torch.OutOfMemoryError(error)

    suggestions = analyse(build_report(crash_from(held, Held(), torch.randn(8, 2))))[1]
    assert all(".split(" not in s.code for s in suggestions)
    assert suggestions[0].kind == "retry" and "sleep(0.5)" in suggestions[1].code


# -- control ----------------------------------------------------------------------------------------


def lookup(table, batches):
    seen = []
    for ids in batches:
        words = ids.clone()
        seen.append(table(words))
    return seen


def test_ids_past_the_embedding_are_replaced_before_the_iteration_is_skipped() -> None:
    table = nn.Embedding(10, 3)
    batches = [torch.tensor([1, 2]), torch.tensor([3, 12, 4])]
    suggestions = answer(lookup, table, batches)
    kinds = [s.kind for s in suggestions]
    assert kinds == ["action", "skip_iteration"], kinds
    assert suggestions[0].code == "ids = ids.masked_fill(ids >= 10, 0)\nwords = words.masked_fill(words >= 10, 0)"
    assert "Last resort" in suggestions[0].explanation and "Last resort" in suggestions[1].explanation


def write_log(folder, lines):
    for line in lines:
        with open(f"{folder}/run1/log.txt", "a") as stream:
            stream.write(line)


def test_a_write_into_a_missing_folder_makes_the_folder(tmp_path) -> None:
    suggestions = answer(write_log, str(tmp_path), ["a"])
    folder = next(s for s in suggestions if s.kind == "action" and "makedirs" in s.code)
    assert f"os.makedirs({str(tmp_path / 'run1')!r}, exist_ok=True)" in folder.code


def flaky_read(reader, steps):
    got = []
    for _ in range(steps):
        got.append(reader())
    return got


def test_transient_faults_retry_first_then_wait_longer_and_longer() -> None:
    def reader():
        raise ConnectionResetError(104, "Connection reset by peer")

    suggestions = answer(flaky_read, reader, 2)
    waits = [float(s.code.split("sleep(")[1].split(")")[0]) for s in suggestions if "sleep(" in s.code]
    assert suggestions[0].kind == "retry" and waits[:4] == sorted(waits[:4]) and waits[0] == 0.5


# -- ranking, bounds, sources ------------------------------------------------------------------------


def test_ranking_puts_what_gives_up_work_last_and_keeps_confidences_non_increasing() -> None:
    def nan_loss(model, batches):
        for x in batches:
            loss = model(x).sum()
            assert torch.isfinite(loss), "loss is not finite"
        return loss

    batches = [torch.ones(2, 3), torch.full((2, 3), float("nan"))]
    suggestions = answer(nan_loss, nn.Linear(3, 1), batches)
    kinds = [s.kind for s in suggestions]
    assert kinds[-1] in ("skip", "skip_iteration") and "surgery" in kinds
    assert all(a.confidence >= b.confidence for a, b in zip(suggestions, suggestions[1:]))
    givers = [i for i, s in enumerate(suggestions) if "Last resort" in s.explanation]
    keepers = [i for i, s in enumerate(suggestions) if "Last resort" not in s.explanation]
    assert not givers or not keepers or max(keepers) < min(givers)


def test_candidates_are_deduplicated_and_bounded() -> None:
    candidates = [GeneratedRepair("surgery", f"edit {i}", "shapes", 1, code=f"def f():\n    return {i % 3}\n")
                  for i in range(40)]
    candidates += [GeneratedRepair("retry", "again", "transient", 2) for _ in range(5)]
    kept = rank.ranked(candidates, [])
    assert [c.kind for c in kept] == ["retry", "surgery", "surgery", "surgery"]
    many = [GeneratedRepair("surgery", "x", "shapes", 1, code=f"def f():\n    return {i}\n") for i in range(40)]
    assert len(rank.ranked(many, [])) == rank.MAX_WHOLE_DEFS <= rank.MAX_CANDIDATES


def test_a_candidate_that_builds_a_new_layer_is_labelled_as_discarding_state() -> None:
    fresh_layer = GeneratedRepair("action", "rebuild", "rules", 2,
                                  code="import torch\nmodel.fc = torch.nn.Linear(3, 4)")
    flatten = GeneratedRepair("action", "flatten", "shapes", 1, code="x = x.flatten(1)")
    kept = rank.ranked([fresh_layer, flatten], [])
    assert [c.explanation for c in kept] == ["flatten", "rebuild"] and "discards trained state" in kept[1].gives_up


class Model(nn.Module):
    """A method as the site: its source is indented, and holds characters of several UTF-8 bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 2)

    def score(self, batches):
        total = 0.0
        for x in batches:
            label = "épreuve — ü"  # a comment with é, — and ü before the edit
            total += self.layer(x.flatten(1)).sum() if label else 0.0
            total = total / len(batches)[0]
        return total


def test_an_edit_of_an_indented_method_with_wide_characters_keeps_every_other_character() -> None:
    model = Model()
    crash = crash_from(Model.score, model, [torch.randn(2, 4)])
    report = build_report(crash)
    view = View(report, sites(report)[0])
    assert view.margin == 4 and view.statement is not None
    node = next(n for n in view.walk() if type(n).__name__ == "Subscript")
    from repairbot.generate import edits

    new = edits.replace(view, [(node, "len(batches)")])
    assert new is not None
    old_lines, new_lines = crash.source.splitlines(), new.splitlines()
    assert [i for i, (a, b) in enumerate(zip(old_lines, new_lines)) if a != b] == [5]
    assert new_lines[5] == "            total = total / len(batches)" and len(new_lines) == len(old_lines)
    assert textwrap.dedent(new).startswith("def score(self, batches):")


def test_a_view_is_made_for_a_user_callee_whose_source_the_report_carries() -> None:
    report = build_report(crash_from(calls_a_helper, torch.ones(2, 3, dtype=torch.float64)))
    places = sites(report)
    assert [p.target is None for p in places] == [True, False]
    assert places[1].target is not None and places[1].target.endswith(".helper")
    patches = [s for s in analyse(report)[1] if s.kind == "patch_function"]
    assert patches and all(s.target == places[1].target for s in patches)


def helper(layer, batch):
    return layer(batch)


def calls_a_helper(batch):
    layer = nn.Linear(3, 1)
    for _ in range(2):
        out = helper(layer, batch)
    return out


# -- mechanisms added after the first DLFailureBenchmark --repairs-only run ------------------------


def thumbnails(images, scale):
    side = images.shape[-1] * scale
    return F.interpolate(images, size=(side, side), mode="nearest")


def test_a_float_named_by_a_type_error_of_any_wording_is_made_an_int() -> None:
    images = torch.rand(2, 1, 12, 12)
    suggestions = answer(thumbnails, images, 1 / 3)
    made_int = first_surgery_with(suggestions, thumbnails, "int(")
    assert surgery_function(made_int, thumbnails)(images, 1 / 3).shape == (2, 1, 4, 4)


def decoded(flat, batch_size):
    previews = []
    for start in range(0, len(flat), batch_size):
        chunk = flat[start : start + batch_size]
        previews.append(chunk.view(batch_size, 2, 3)[:1])
    return previews


def test_a_constant_batch_size_in_a_view_is_left_to_be_inferred() -> None:
    flat = torch.arange(10 * 6.0).view(10, 6)
    suggestions = answer(decoded, flat, 4)
    inferred = first_surgery_with(suggestions, decoded, "chunk.view(-1, 2, 3)")
    assert [p.shape for p in surgery_function(inferred, decoded)(flat, 4)] == [(1, 2, 3)] * 3


def weighted_step(model, optimizer, x, y, hard):
    for _ in range(2):
        logits = model(x)
        if not hard:
            loss = F.cross_entropy(logits, y)
        else:
            per_sample = F.cross_entropy(logits, y, reduction="none")
            loss = per_sample * 2.0
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


def test_backward_on_a_loss_per_sample_reduces_it_where_it_is_computed() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(6, 4), torch.tensor([0, 1, 2, 0, 1, 2])
    suggestions = answer(weighted_step, model, optimizer, x, y, True)
    assert "where it is computed" in suggestions[0].explanation
    reduced = first_surgery_with(suggestions, weighted_step, "loss = (per_sample * 2.0).mean()")
    assert isinstance(surgery_function(reduced, weighted_step)(model, optimizer, x, y, True), float)
    at_call = first_surgery_with(suggestions, weighted_step, "loss.mean().backward()")
    with pytest.raises((RuntimeError, ValueError)):  # `loss.item()` still meets six elements: a trial refuses it
        surgery_function(at_call, weighted_step)(model, optimizer, x, y, True)


def stacked(pictures):
    return torch.stack([picture * 2 for picture in pictures])


def test_tensors_stacked_that_differ_in_a_size_1_dimension_are_expanded() -> None:
    pictures = [torch.rand(3, 5, 5), torch.rand(3, 5, 5), torch.rand(1, 5, 5)]
    suggestions = answer(stacked, pictures)
    expanded = first_surgery_with(suggestions, stacked, "(picture * 2).expand(3, -1, -1)")
    batch = surgery_function(expanded, stacked)(pictures)
    assert batch.shape == (3, 3, 5, 5) and torch.equal(batch[2, 0], batch[2, 2])


def policy_of(observation):
    scores = torch.from_numpy(observation).float() * 2
    if torch.isnan(scores).any():
        raise ValueError("the policy's scores hold nan")
    return int(scores.argmax())


def act_on(observations):
    actions = []
    for observation in observations:
        action = policy_of(observation)
        actions.append(action)
    return actions


def test_nan_in_a_numpy_observation_is_zeroed_before_the_iteration_is_skipped() -> None:
    observations = [np.array([0.1, 0.9], dtype=np.float32), np.array([np.nan, 0.5], dtype=np.float32)]
    suggestions = answer(act_on, observations)
    kinds = [(s.kind, "NaN and Inf values" in s.explanation) for s in suggestions]
    assert kinds.index(("surgery", True)) < kinds.index(("skip_iteration", False))
    zeroed = first_surgery_with(suggestions, act_on, "numpy.nan_to_num(observation")
    assert surgery_function(zeroed, act_on)(observations) == [1, 1]


def fit_on_loader(model, optimizer, loader):
    for x, y in loader:
        loss = F.binary_cross_entropy(torch.sigmoid(model(x)), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return float(loss.detach())


def loader_with_a_record_of_nan(partly: bool) -> list:
    x, y = torch.randn(8, 4), (torch.rand(8, 1) > 0.5).float()
    if partly:
        x[3, :2] = float("nan")  # missing readings among a record's others
    else:
        x[3] = float("nan")  # a record that failed to decode: no finite value
    return [(x, y)]


def test_a_record_with_no_finite_value_is_left_out_of_the_loaders_batch_not_read_as_zeros() -> None:
    """`for x, y in loader:` binds the batch: its rows with NaN are left out at the top of the loop's body
    (zeros in place of a whole record would be trained on, with its label, each time it is loaded); a record
    with a few missing readings may still be read with zeros, after the rows are left out."""
    model, loader = torch.nn.Linear(4, 1), loader_with_a_record_of_nan(partly=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    suggestions = answer(fit_on_loader, model, optimizer, loader)
    surgeries = [changed_lines(s, fit_on_loader) for s in suggestions if s.kind == "surgery"]
    assert not any("nan_to_num" in line for lines in surgeries for line in lines), surgeries
    dropped = first_surgery_with(suggestions, fit_on_loader, "x, y = x[_daifu_finite], y[_daifu_finite]")
    assert suggestions.index(dropped) < [s.kind for s in suggestions].index("skip_iteration")
    assert 0 < surgery_function(dropped, fit_on_loader)(model, optimizer, loader) < 10  # the 7 other rows train

    partly = answer(fit_on_loader, model, optimizer, loader_with_a_record_of_nan(partly=True))
    assert any("nan_to_num" in line for s in partly if s.kind == "surgery" for line in changed_lines(s, fit_on_loader))


def labelled_steps(model, optimizer, batches):
    for x, y in batches:
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return len(batches)


def test_rows_with_a_label_past_the_classes_are_left_out_before_the_iteration_is_skipped() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [(torch.randn(5, 4), torch.tensor([0, 1, 2, 1, 0])), (torch.randn(5, 4), torch.tensor([0, 3, 2, 1, 0]))]
    suggestions = answer(labelled_steps, model, optimizer, batches)
    kinds = [s.kind for s in suggestions]
    dropped = first_surgery_with(suggestions, labelled_steps, "x, y = x[_daifu_keep], y[_daifu_keep]")
    assert "_daifu_keep = y < 3" in dropped.code and kinds.index("surgery") < kinds.index("skip_iteration")
    assert surgery_function(dropped, labelled_steps)(model, optimizer, batches) == 2


def histogram_of(logits, steps):
    counts = []
    for _ in range(steps):
        confidence = logits.softmax(dim=1).max(dim=1).values
        counts.append(np.histogram(confidence.numpy(), bins=4, range=(0.0, 1.0))[0])
    return counts


def histogram_then_loss(logits, steps):
    for _ in range(steps):
        confidence = logits.softmax(dim=1).max(dim=1).values
        counts = np.histogram(confidence.numpy(), bins=4, range=(0.0, 1.0))[0]
        confidence.sum().backward()
    return counts


def test_a_tensor_read_only_by_the_numpy_call_may_be_rebound_detached_by_an_action() -> None:
    logits = torch.randn(6, 3, requires_grad=True)
    crash = crash_from(histogram_of, logits, 2)
    _, suggestions = analyse(build_report(crash))
    action = next(s for s in suggestions if s.kind == "action")
    assert action.code == "confidence = confidence.detach()"
    assert run_action_then_statement(action, crash, histogram_of)["confidence"].requires_grad is False
    # read again after the statement (its graph still needed there): no rebinding is offered
    _, later = analyse(build_report(crash_from(histogram_then_loss, logits, 2)))
    assert [s.kind for s in later if s.kind == "action"] == []
