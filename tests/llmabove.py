"""Two programs whose crash a model fixes a line above the faulty statement (issue 34, item 5).

The fix changes how `values` is made; the crash is two statements below it, where the integer
tensor's mean is taken. A surgery resumes at the first changed statement, so the statements between
run a second time: in `average`, they only compute (the repaired run ends as the fixed program
does); in `average_counting`, one of them appends to a list the caller holds.
"""

from __future__ import annotations

import torch


def average(batches):
    means = []
    for batch in batches:
        values = torch.tensor(batch)
        scaled = values * 2
        mean = scaled.mean()
        means.append(float(mean))
    return means


def average_counting(batches, seen):
    means = []
    for batch in batches:
        values = torch.tensor(batch)
        seen.append(len(batch))
        mean = values.mean()
        means.append(float(mean))
    return means


BATCHES = [[1, 2, 3], [4, 5, 6, 7], [8, 9]]
FIX = ("values = torch.tensor(batch)", "values = torch.tensor(batch, dtype=torch.float32)")
"""The line at fault, and the model's edit of it."""
