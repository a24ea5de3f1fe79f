"""1-D CNN for time-series classification (ECG-like beats) that keeps the best model by validation loss.

The validation helper was written in a hurry: `nn.CrossEntropyLoss(logits, yb)` passes the
tensors to the loss *class's constructor* (as `weight` and `size_average`) instead of calling
a loss object on them; the constructor tests `size_average` for truth and the first
validation, after 25 steps, raises.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

SETUP = {"length": 64, "classes": 3, "batch": 32, "epochs": 4, "lr": 3e-3, "val_every": 25}


def beats(seed: int, n: int):
    """Three beat shapes (narrow spike, wide bump, double spike) at jittered positions, with noise."""
    gen = torch.Generator().manual_seed(seed)
    t = torch.arange(SETUP["length"]).float()
    labels = torch.randint(0, SETUP["classes"], (n,), generator=gen)
    centre = 32 + torch.randint(-8, 9, (n,), generator=gen).float()
    width = torch.tensor([2.0, 6.0, 2.0])[labels]
    signal = torch.exp(-((t - centre[:, None]) ** 2) / (2 * width[:, None] ** 2))
    second = torch.exp(-((t - centre[:, None] - 10) ** 2) / 8.0) * (labels == 2).float()[:, None]
    x = signal + second + 0.25 * torch.randn(n, SETUP["length"], generator=gen)
    return x.unsqueeze(1), labels


class BeatNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv1d(1, 16, 7, padding=3), nn.ReLU(), nn.MaxPool1d(2),
                                      nn.Conv1d(16, 32, 5, padding=2), nn.ReLU(), nn.AdaptiveMaxPool1d(1))
        self.classify = nn.Linear(32, SETUP["classes"])

    def forward(self, x):
        return self.classify(self.features(x).flatten(1))


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader) -> tuple[float, float]:
    model.eval()
    total_loss, correct, count = 0.0, 0, 0
    for xb, yb in loader:
        logits = model(xb)
        total_loss += nn.CrossEntropyLoss(logits, yb).item() * len(yb)
        correct += (logits.argmax(1) == yb).sum().item()
        count += len(yb)
    model.train()
    return total_loss / count, correct / count


@daifu.transform
def train(model, optimizer, train_loader, val_loader, test_data, ckpt_dir, start, stop):
    criterion = nn.CrossEntropyLoss()
    best_loss, best_state, improvements, checks = math.inf, None, 0, 0
    step = 0
    losses = []
    for epoch in range(SETUP["epochs"]):
        for xb, yb in train_loader:
            if step >= stop:
                break
            if step >= start:
                loss = criterion(model(xb), yb)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
                if (step + 1) % SETUP["val_every"] == 0:
                    val_loss, val_acc = evaluate(model, val_loader)
                    checks += 1
                    if val_loss < best_loss:
                        best_loss, improvements = val_loss, improvements + 1
                        best_state = {k: v.clone() for k, v in model.state_dict().items()}
                    save_checkpoint(ckpt_dir, step + 1, model, optimizer)
            step += 1
    if best_state is not None:
        model.load_state_dict(best_state)
    x_test, y_test = test_data
    with torch.no_grad():
        test_acc = (model(x_test).argmax(1) == y_test).float().mean().item()
    return {"steps": len(losses), "val_checks": checks, "best_val_loss": best_loss, "improvements": improvements,
            "test_acc": test_acc}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    x, y = beats(seed, 1300)
    train_loader = DataLoader(TensorDataset(x[:800], y[:800]), batch_size=SETUP["batch"], shuffle=True,
                              generator=torch.Generator().manual_seed(seed))
    val_loader = DataLoader(TensorDataset(x[800:1000], y[800:1000]), batch_size=100)
    model = BeatNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=SETUP["lr"])
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "ckpt"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    total = SETUP["epochs"] * len(train_loader)
    return train(model, optimizer, train_loader, val_loader, (x[1000:], y[1000:]), ckpt_dir, start,
                 total if until is None else until)
