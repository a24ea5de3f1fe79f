"""A cast to an integer dtype is proposed only where it keeps every value.

Category codes read from a table of floats (`read_csv` into one float array) reach an `nn.Embedding`, which
asks for Long or Int indices. Casting the codes is exact (they are whole numbers); casting the real-valued
features next to them in the same tuple, or a float tensor with fractions, would truncate them and the run
would go on with other data, which a trial that only checks for a crash cannot see. Each test crashes for
real and asks the offline engine (`repairbot.rules.analyse`, the generator's candidates ranked in).
"""

from __future__ import annotations

import pytest

from tests.extras import BOT

for _package in (*BOT, "torch"):
    pytest.importorskip(_package)

from daifu.report.build import build_report
from repairbot.protocol import Suggestion
from repairbot.rules import analyse
from tests.botfixtures import crash_from, surgery_function

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch


class Tabular(nn.Module):
    """An embedding for a categorical column beside two real-valued columns."""

    def __init__(self) -> None:
        super().__init__()
        self.kind = nn.Embedding(5, 3)
        self.head = nn.Linear(5, 2)

    def forward(self, codes, features):
        return self.head(torch.cat([self.kind(codes), features], dim=1))


def score(model, table):
    return model(table[0], table[1]).sum()


def suggestions_for(*args) -> list[Suggestion]:
    _, found = analyse(build_report(crash_from(score, *args)))
    return found


def surgeries(found: list[Suggestion]) -> list[str]:
    return [s.code for s in found if s.kind == "surgery"]


def test_only_the_whole_numbered_item_of_a_tuple_is_cast_to_integers() -> None:
    torch.manual_seed(0)
    model = Tabular()
    codes = torch.tensor([0.0, 3.0, 4.0, 1.0])  # whole numbers stored as floats
    features = torch.randn(4, 2)  # fractions: a cast to integers would truncate them
    table = (codes, features, torch.tensor([0, 1, 1, 0]))  # and the labels, already integers
    found = suggestions_for(model, table)
    casts = [code for code in surgeries(found) if ".long()" in code or ".int()" in code]
    assert casts, surgeries(found)
    assert not any("for t in" in code for code in casts)  # no cast of every item
    repaired = surgery_function(next(s for s in found if s.kind == "surgery" and s.code == casts[0]), score)
    expected = model(codes.long(), features).sum()
    assert torch.equal(repaired(model, table), expected)  # the features reached the model unchanged


def test_no_integer_cast_of_floats_that_are_not_whole_numbers() -> None:
    torch.manual_seed(0)
    model = Tabular()
    table = (torch.tensor([0.5, 3.2, 4.0, 1.0]), torch.randn(4, 2), torch.tensor([0, 1, 1, 0]))  # not codes
    casts = [code for code in surgeries(suggestions_for(model, table)) if ".long()" in code or ".int()" in code]
    assert casts == []
