"""Correct repairs of real crashes that automatic mode must admit: the corpus of `test_admission`.

Each `Repair` is a small training function that crashes for real (the message is the installed
torch's or numpy's own), and the edit of one line that repairs it: a cast, a `//`, `.detach()` before
NumPy, `.to_dense()` of a sparse gradient, a `torch.no_grad()` block, a clamp, an `ignore_index` mask,
a call of the program's own helper, a dict entry made on first use. The repair is what a model or the
rules engine writes; `test_admission` checks each is admitted unattended as a surgery, and that the
edited function runs through without the crash.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from numpy import median as middle


@dataclass(frozen=True)
class Repair:
    name: str
    function: Callable[..., Any]
    arguments: Callable[[], tuple[Any, ...]]
    message: str
    """A part of the real exception's message."""
    old: str
    new: str
    """The line (or lines) replacing `old` in the function's source: the repair."""


def as_tensor_of_floats(values: Any) -> torch.Tensor:
    """The program's own helper: a float32 tensor from anything array-like."""
    return torch.as_tensor(np.asarray(values), dtype=torch.float32)


def median_weight(model, x, y):
    loss = F.mse_loss(model(x), y)
    loss.backward()
    w = model.weight
    typical = np.median(w.numpy())
    return float(typical)


def median_weight_aliased(model, x, y):
    loss = F.mse_loss(model(x), y)
    loss.backward()
    w = model.weight
    typical = middle(w.numpy())
    return float(typical)


def sparse_gradient_to_numpy(emb, ids):
    loss = emb(ids).sum()
    loss.backward()
    grad = emb.weight.grad.numpy()
    return grad.sum()


def sparse_gradient_max(emb, ids):
    loss = emb(ids).sum()
    loss.backward()
    largest = emb.weight.grad.abs().max()
    return float(largest)


def record_validation(history, scores):
    for score in scores:
        v = float(score)
        history["val_acc"].append(v)
    return history


def float_labels(model, x, y):
    out = model(x)
    loss = F.cross_entropy(out, y)
    return loss.item()


def float64_features(model, features, y):
    x = torch.from_numpy(features)
    loss = F.cross_entropy(model(x), y)
    return loss.item()


def half_of(items):
    n = len(items) / 2
    return items[:n]


def view_of_a_transpose(x):
    t = x.t()
    flat = t.view(-1)
    return flat.sum()


def images_into_linear(model, images):
    out = model(images)
    return out.shape


def manual_sgd_step(w, x, y):
    loss = ((x @ w - y) ** 2).mean()
    loss.backward()
    w -= 0.1 * w.grad
    return w


def log_of_probabilities(p, y):
    loss = -(y * torch.log(p)).sum(dim=1).mean()
    if not torch.isfinite(loss):
        raise FloatingPointError(f"Loss is {loss.item()}, stopping training")
    return loss.item()


def padded_labels(model, x, y):
    out = model(x)
    loss = F.cross_entropy(out, y)
    return loss.item()


def list_of_scores(values):
    scores = torch.tensor(values)
    return scores.mean()


def column_labels(model, x, y):
    out = model(x)
    loss = F.cross_entropy(out, y)
    return loss.item()


def flat_batches(model, batches):
    total = 0.0
    for x, y in batches:
        out = model(x)
        total += F.cross_entropy(out, y).item()
    return total


def _linear(inputs: int, outputs: int) -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(inputs, outputs)


def _embedding() -> tuple[nn.Embedding, torch.Tensor]:
    return nn.Embedding(10, 3, sparse=True), torch.tensor([1, 2, 2])


REPAIRS = [
    Repair("detach before numpy", median_weight, lambda: (_linear(3, 1), torch.randn(4, 3), torch.randn(4, 1)),
           "Can't call numpy() on Tensor that requires grad",
           "np.median(w.numpy())", "np.median(w.detach().numpy())"),
    Repair("detach before an aliased numpy function", median_weight_aliased,
           lambda: (_linear(3, 1), torch.randn(4, 3), torch.randn(4, 1)),
           "Can't call numpy() on Tensor that requires grad", "middle(w.numpy())", "middle(w.detach().numpy())"),
    Repair("a sparse gradient made dense for numpy", sparse_gradient_to_numpy, _embedding,
           "can't convert Sparse layout tensor to numpy", ".grad.numpy()", ".grad.to_dense().numpy()"),
    Repair("a sparse gradient made dense for max", sparse_gradient_max, _embedding,
           "Could not run 'aten::max'", ".grad.abs().max()", ".grad.to_dense().abs().max()"),
    Repair("a dict entry made on first use", record_validation, lambda: ({}, [0.5, 0.75]),
           "val_acc", 'history["val_acc"].append(v)', 'history.setdefault("val_acc", []).append(v)'),
    Repair("float labels cast to long", float_labels,
           lambda: (_linear(4, 3), torch.randn(5, 4), torch.tensor([0.0, 1.0, 2.0, 1.0, 0.0])),
           "expected target dtype to be Long", "F.cross_entropy(out, y)", "F.cross_entropy(out, y.long())"),
    Repair("float64 features cast to float32", float64_features,
           lambda: (_linear(4, 3), np.random.default_rng(0).standard_normal((5, 4)), torch.tensor([0, 1, 2, 1, 0])),
           "must have the same dtype", "torch.from_numpy(features)", "torch.from_numpy(features).float()"),
    Repair("floor division for a slice bound", half_of, lambda: ([1, 2, 3, 4],),
           "slice indices must be integers", "len(items) / 2", "len(items) // 2"),
    Repair("reshape instead of view", view_of_a_transpose, lambda: (torch.randn(3, 4),),
           "view size is not compatible", "t.view(-1)", "t.reshape(-1)"),
    Repair("images flattened for a linear layer", images_into_linear,
           lambda: (_linear(16, 10), torch.randn(2, 4, 4)), "cannot be multiplied",
           "model(images)", "model(images.flatten(1))"),
    Repair("an in-place update under no_grad", manual_sgd_step,
           lambda: (torch.zeros(3, requires_grad=True), torch.randn(4, 3), torch.randn(4)),
           "a leaf Variable that requires grad is being used in an in-place operation",
           "    w -= 0.1 * w.grad\n", "    with torch.no_grad():\n        w -= 0.1 * w.grad\n"),
    Repair("probabilities clamped before the log", log_of_probabilities,
           lambda: (torch.tensor([[1.0, 0.0], [0.5, 0.5]]), torch.tensor([[0.0, 1.0], [1.0, 0.0]])),
           "Loss is inf", "torch.log(p)", "torch.log(p.clamp(min=1e-7))"),
    Repair("padding labels ignored", padded_labels,
           lambda: (_linear(4, 3), torch.randn(5, 4), torch.tensor([0, 1, -1, 2, -1])),
           "out of bounds", "F.cross_entropy(out, y)", "F.cross_entropy(out, y, ignore_index=-1)"),
    Repair("padding labels masked out", padded_labels,
           lambda: (_linear(4, 3), torch.randn(5, 4), torch.tensor([0, 1, -1, 2, -1])),
           "out of bounds", "    loss = F.cross_entropy(out, y)\n",
           "    keep = y != -1\n    loss = F.cross_entropy(out[keep], y[keep])\n"),
    Repair("the program's own helper", list_of_scores, lambda: ([[1, 2], [3]],),
           "expected sequence of length", "torch.tensor(values)",
           "torch.cat([as_tensor_of_floats(v) for v in values])"),
    Repair("column labels squeezed and cast", column_labels,
           lambda: (_linear(4, 3), torch.randn(5, 4), torch.tensor([[0.0], [1.0], [2.0], [1.0], [0.0]])),
           "0D or 1D target tensor expected", "F.cross_entropy(out, y)", "F.cross_entropy(out, y.squeeze(1).long())"),
    Repair("labels cast inside the loop", flat_batches,
           lambda: (_linear(4, 3), [(torch.randn(2, 4), torch.tensor([0.0, 1.0]))]),
           "expected target dtype to be Long", "F.cross_entropy(out, y)", "F.cross_entropy(out.float(), y.long())"),
]
