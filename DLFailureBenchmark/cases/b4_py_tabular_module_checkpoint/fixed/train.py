"""Tabular regression (house-price style) with an MLP, written on a multi-GPU machine.

The script wraps the model in DataParallel only when there is more than one GPU, but its
end-of-epoch checkpoint always saves `model.module.state_dict()`. On a CPU (or one GPU) the
model is not wrapped, and the first checkpoint, after epoch 1, raises AttributeError.

Fixed: the checkpoint saves the wrapped module's state when there is a wrapper, else the model's.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import daifu


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="price regression")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--weight-decay", type=float, default=1e-4)
    return parser.parse_args([])


def make_table(seed: int, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    area = torch.rand(rows, generator=gen) * 2 + 0.5
    rooms = torch.randint(1, 6, (rows,), generator=gen).float()
    age = torch.rand(rows, generator=gen) * 50
    dist = torch.rand(rows, generator=gen) * 20
    noise = 0.1 * torch.randn(rows, generator=gen)
    price = 1.5 * area + 0.2 * rooms - 0.01 * age - 0.05 * dist + 0.3 * area * (dist < 5).float() + noise
    features = torch.stack([area, rooms, age / 50, dist / 20], dim=1)
    return features, price.unsqueeze(1)


class PriceMLP(nn.Module):
    def __init__(self, n_features: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_features, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, x):
        return self.net(x)


@torch.no_grad()
def rmse(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    return torch.sqrt(((model(x) - y) ** 2).mean()).item()


@daifu.transform
def fit(model, optimizer, loader, val, args, out_dir, start, stop):
    loss_fn = nn.MSELoss()
    step = 0
    saved = []
    history = []
    for epoch in range(args.epochs):
        for xb, yb in loader:
            if step < start:
                step += 1
                continue
            if step >= stop:
                break
            loss = loss_fn(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            history.append(loss.item())
            step += 1
        if step >= stop:
            break
        path = out_dir / "last.pt"
        net = model.module if isinstance(model, nn.DataParallel) else model
        torch.save({"model": net.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                    "epoch": epoch + 1}, path)
        saved.append(epoch + 1)
    return {"steps": len(history), "val_rmse": rmse(model, *val), "checkpoints": len(saved)}


def main(workdir, seed=0, resume=None, until=None):
    args = parse_args()
    torch.manual_seed(seed)
    x, y = make_table(seed, 1200)
    train_set = TensorDataset(x[:1000], y[:1000])
    loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    model = PriceMLP(x.size(1))
    if torch.cuda.device_count() > 1:
        model = nn.DataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    start = 0
    if resume:
        state = torch.load(resume, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
    out_dir = Path(workdir) / "checkpoints"
    out_dir.mkdir(parents=True, exist_ok=True)
    total = args.epochs * len(loader)
    result = fit(model, optimizer, loader, (x[1000:], y[1000:]), args, out_dir, start,
                 total if until is None else until)
    result["checkpoint_loads"] = 0
    if (out_dir / "last.pt").is_file():
        state = torch.load(out_dir / "last.pt", weights_only=True)
        fresh = PriceMLP(x.size(1))
        result["checkpoint_loads"] = int(not fresh.load_state_dict(state["model"], strict=False).missing_keys)
    return result
