"""Two slips in the operand a layer or a loss is given, each proposed as the edit that undoes it.

- `unread`: a value made from the operand a line up and never used (`shift_logits` beside `logits`) is read
  in its place — the shape bug of the Hugging Face `Trainer` program of `tests/test_frameworks.py`;
- `shapes`: an input a `reshape` made unfit for its linear layer, where the tensor before the reshape has
  the layer's features as it stands — the bug of its Lightning and Accelerate programs.

Real crashes (torch's own messages); each candidate's surgery, compiled and run, gives what the fixed
function gives.
"""

from __future__ import annotations

import pytest

from tests.extras import BOT

for _package in BOT:
    pytest.importorskip(_package)

from repairbot.generate import generate
from repairbot.generate.candidate import GeneratedRepair
from daifu.report.build import build_report
from repairbot.protocol import Suggestion
from tests.botfixtures import crash_from, surgery_function

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch
F = torch.nn.functional
VOCAB = 11


def of_family(family: str, fn, *args) -> list[GeneratedRepair]:
    found, _ = generate(build_report(crash_from(fn, *args)))
    return [c for c in found if c.family == family]


def run(candidate: GeneratedRepair, fn, *args):
    return surgery_function(Suggestion(kind="surgery", code=candidate.code, explanation="", confidence=0.5), fn)(*args)


def next_token_loss(logits, labels):
    shift_logits = logits[:, :-1, :]
    shift_labels = labels[:, 1:]
    return F.cross_entropy(logits.reshape(-1, VOCAB), shift_labels.reshape(-1))


def next_token_loss_fixed(logits, labels):
    return F.cross_entropy(logits[:, :-1, :].reshape(-1, VOCAB), labels[:, 1:].reshape(-1))


def next_token_loss_shifts_kept(logits, labels):
    shift_logits = logits[:, :-1, :]
    shift_labels = labels[:, 1:]
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), shift_labels.reshape(-1))
    return loss, shift_logits


def tokens() -> tuple[object, object]:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(2, 5, VOCAB, generator=generator), torch.randint(0, VOCAB, (2, 5), generator=generator)


def test_a_value_made_from_the_operand_and_never_used_is_read_in_its_place() -> None:
    logits, labels = tokens()
    [candidate] = of_family("unread", next_token_loss, logits, labels)
    assert "F.cross_entropy(shift_logits.reshape(-1, VOCAB), shift_labels.reshape(-1))" in candidate.code
    assert "`shift_logits` was made from `logits`" in candidate.explanation
    assert torch.equal(run(candidate, next_token_loss, logits, labels), next_token_loss_fixed(logits, labels))


def test_a_value_the_function_reads_elsewhere_is_no_slip() -> None:
    assert of_family("unread", next_token_loss_shifts_kept, *tokens()) == []


def add_noise(x, noise_rows):
    noise = torch.randn(noise_rows, x.shape[1])
    scaled = x * 2
    return x + noise  # `scaled` is unread but has `x`'s shape: reading it changes nothing the crash is about


def test_a_value_of_the_operands_own_shape_is_not_proposed() -> None:
    assert of_family("unread", add_noise, torch.randn(4, 3), 5) == []


def classify(net, x):
    return net(x.reshape(-1, 4))


def test_an_input_a_reshape_made_unfit_for_its_layer_is_given_the_tensor_before_it() -> None:
    torch.manual_seed(0)
    net = torch.nn.Linear(8, 3)
    x = torch.randn(6, 8)
    [candidate] = [c for c in of_family("shapes", classify, net, x) if "net(x)" in c.code]
    assert torch.equal(run(candidate, classify, net, x), net(x))


def test_a_reshape_of_a_tensor_with_more_dimensions_is_flattened_instead() -> None:
    torch.manual_seed(0)
    net = torch.nn.Linear(8, 3)
    x = torch.randn(6, 2, 4)
    [candidate] = [c for c in of_family("shapes", classify, net, x) if "net(x.flatten(1))" in c.code]
    assert torch.equal(run(candidate, classify, net, x), net(x.flatten(1)))
