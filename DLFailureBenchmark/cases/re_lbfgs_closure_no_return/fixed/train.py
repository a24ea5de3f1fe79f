"""Realistic set, API misuse: a time-series forecaster trained with L-BFGS whose closure returns nothing.

A complete script fitting a recurrent forecaster to generated load curves (each a daily and a
weekly rhythm of its own phase and size, a slow drift and noise): two stacked LSTM cells read a
curve one value at a time and predict the next, then go on alone for `--future` values. The
whole training set is one batch, optimised by L-BFGS, which calls a closure to re-evaluate the
loss and its gradient as often as its line search needs. After each step the forecaster predicts
the test curves, the predictions are saved, and a checkpoint is written.

The bug: the closure computes the loss and calls `backward()`, but does not return the loss;
L-BFGS takes `float(closure())` at once, and the first step fails with "float() argument must be
a string or a real number, not 'NoneType'".

Fixed: the closure returns the loss.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import torch
from torch import nn

import daifu

CHECKPOINT_NAME = "ckpt.pt"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Forecast load curves with two LSTM cells and L-BFGS.")
    parser.add_argument("--curves", type=int, default=40, help="curves generated (the last --test for testing)")
    parser.add_argument("--test", type=int, default=6)
    parser.add_argument("--length", type=int, default=120, help="values per curve (every two hours: ten days)")
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--steps", type=int, default=4, help="L-BFGS steps")
    parser.add_argument("--lr", type=float, default=0.8)
    parser.add_argument("--max-iter", type=int, default=10, help="closure evaluations per step, at most")
    parser.add_argument("--future", type=int, default=24, help="values predicted past each test curve")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--workdir", default="runs/load_forecast")
    parser.add_argument("--resume", default=None)
    parser.add_argument("--until", type=int, default=None, help="stop once this many steps are done in all")
    return parser.parse_args(argv)


def load_curves(count: int, length: int, seed: int) -> torch.Tensor:
    """`count` curves of `length` two-hourly values: daily and weekly rhythms, a drift and noise, in about [-1, 1]."""
    rng = np.random.default_rng(seed)
    hours = 2 * np.arange(length)[None, :]
    phases = rng.uniform(0, 2 * np.pi, (count, 2))
    daily = rng.uniform(0.4, 0.8, (count, 1)) * np.sin(2 * np.pi * hours / 24 + phases[:, :1])
    weekly = rng.uniform(0.1, 0.3, (count, 1)) * np.sin(2 * np.pi * hours / 168 + phases[:, 1:])
    drift = rng.uniform(-0.2, 0.2, (count, 1)) * hours / hours.max()
    noise = rng.normal(0.0, 0.03, (count, length))
    return torch.from_numpy(daily + weekly + drift + noise).float()


class Forecaster(nn.Module):
    """Two stacked LSTM cells and a linear read-out, stepping through a curve one value at a time."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.cell1 = nn.LSTMCell(1, hidden)
        self.cell2 = nn.LSTMCell(hidden, hidden)
        self.readout = nn.Linear(hidden, 1)

    def forward(self, curves: torch.Tensor, future: int = 0) -> torch.Tensor:
        """The prediction of each next value of `curves` (batch, time), then `future` values fed its own output."""
        batch = curves.size(0)
        h1, c1, h2, c2 = (torch.zeros(batch, self.hidden) for _ in range(4))
        outputs = []
        value = curves[:, :1]
        for t in range(curves.size(1) + future):
            value = curves[:, t : t + 1] if t < curves.size(1) else value
            h1, c1 = self.cell1(value, (h1, c1))
            h2, c2 = self.cell2(h1, (h2, c2))
            value = self.readout(h2)
            outputs.append(value)
        return torch.cat(outputs, dim=1)


def save_checkpoint(path: Path, model: Forecaster, optimizer: torch.optim.Optimizer, step: int) -> None:
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, path)


@daifu.transform
def train(model, optimizer, curves, args, start, workdir):
    train_input, train_target = curves[: -args.test, :-1], curves[: -args.test, 1:]
    test_input, test_target = curves[-args.test :, :-1], curves[-args.test :, 1:]
    criterion = nn.MSELoss()
    predictions = workdir / "predictions"
    predictions.mkdir(exist_ok=True)
    stop = args.steps if args.until is None else args.until
    history = []
    for step in range(start, stop):
        def closure():
            optimizer.zero_grad()
            out = model(train_input)
            loss = criterion(out, train_target)
            loss.backward()
            return loss
        optimizer.step(closure)
        with torch.no_grad():
            train_loss = criterion(model(train_input), train_target).item()
            forecast = model(test_input, future=args.future)
            test_loss = criterion(forecast[:, : -args.future], test_target).item()
        history.append({"step": step + 1, "train_loss": train_loss, "test_loss": test_loss})
        torch.save(forecast, predictions / f"step_{step + 1:02d}.pt")
        save_checkpoint(workdir / CHECKPOINT_NAME, model, optimizer, step + 1)
    if not history:
        return {"steps": 0}
    last = history[-1]
    return {"steps": stop - start, "train_loss": last["train_loss"], "test_loss": last["test_loss"],
            "test_rmse": math.sqrt(last["test_loss"])}


def main(workdir, seed=0, resume=None, until=None):
    argv = ["--workdir", str(workdir), "--seed", str(3 + seed)]
    argv += ["--resume", str(resume)] if resume else []
    argv += ["--until", str(until)] if until is not None else []
    return run(parse_args(argv))


def run(args: argparse.Namespace) -> dict:
    torch.manual_seed(args.seed)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    curves = load_curves(args.curves, args.length, args.seed)
    model = Forecaster(args.hidden)
    optimizer = torch.optim.LBFGS(model.parameters(), lr=args.lr, max_iter=args.max_iter)
    start = 0
    if args.resume:
        state = torch.load(args.resume, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = int(state["step"])
    return train(model, optimizer, curves, args, start, workdir)


if __name__ == "__main__":
    print(run(parse_args()))
