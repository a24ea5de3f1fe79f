"""Tensor shape made above the crash (activity recognition LSTM): the LSTM was built without `batch_first`.

Windows of accelerometer readings come as (batch, time, channels), as the loader makes them;
`nn.LSTM` defaults to (time, batch, channels). The LSTM reads 32 windows of 20 steps as 20
windows of 32 steps, its final hidden state has 20 rows, and the loss finds 20 predictions for
32 labels.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

ACTIVITIES = 4


def get_args():
    parser = argparse.ArgumentParser(description="activity recognition from accelerometer windows")
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--hidden", type=int, default=24)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--save-every", type=int, default=20)
    return parser.parse_args([])


def recordings(seed, count, window):
    """Each activity is a different rhythm on the three axes, plus sensor noise."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, ACTIVITIES, (count,), generator=g)
    t = torch.arange(window, dtype=torch.float32)
    phase = torch.rand(count, 1, generator=g) * 6.28
    freq = (0.3 + 0.25 * labels.float())[:, None]
    wave = torch.sin(freq * t + phase)
    x = torch.stack([wave, torch.roll(wave, 3, 1), wave * (labels[:, None] % 2)], dim=2)
    return x + 0.4 * torch.randn(count, window, 3, generator=g), labels


class ActivityNet(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.rnn = nn.LSTM(3, hidden)
        self.fc = nn.Linear(hidden, ACTIVITIES)

    def forward(self, windows):
        _, (h, _) = self.rnn(windows)
        return self.fc(h[-1])


@torch.no_grad()
def evaluate(model, windows, labels):
    return float((model(windows).argmax(1) == labels).float().mean())


@daifu.transform
def train(model, optimizer, loader, args, test, ckpt_dir, start, stop):
    criterion = nn.CrossEntropyLoss()
    step = 0
    losses = []
    for epoch in range(args.epochs):
        for windows, labels in loader:
            if step >= stop:
                break
            if step < start:
                step += 1
                continue
            loss = criterion(model(windows), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            step += 1
            if step % args.save_every == 0:
                save_checkpoint(ckpt_dir, step, model, optimizer)
    return {"steps": len(losses), "final_loss": sum(losses[-5:]) / 5, "accuracy": evaluate(model, *test)}


def main(workdir, seed=0, resume=None, until=None):
    args = get_args()
    torch.manual_seed(seed)
    train_set = TensorDataset(*recordings(seed, 960, args.window))
    test = recordings(seed + 1, 320, args.window)
    loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    model = ActivityNet(args.hidden)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    stop = args.epochs * len(loader) if until is None else until
    return train(model, optimizer, loader, args, test, ckpt_dir, start, stop)
