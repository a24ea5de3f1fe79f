"""Depthwise-separable CNN (MobileNet-style) trained with a OneCycle learning-rate schedule.

OneCycleLR is told `steps_per_epoch = len(train_set) // batch_size` = 15, but the DataLoader
keeps the last, partial batch, so an epoch has 16 steps. The schedule is sized for 8 * 15 = 120
steps; the 121st `scheduler.step()`, in the last epoch, raises.

Fixed: `steps_per_epoch=len(loader)`, the number of batches the loader really yields.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import daifu

CFG = {"epochs": 8, "batch_size": 64, "max_lr": 0.02, "n_train": 1000, "side": 12}


def glyph_set(seed: int, n: int):
    """Three classes: a plus, a cross, a ring, drawn at random offsets with noise."""
    gen = torch.Generator().manual_seed(seed)
    side = CFG["side"]
    yy, xx = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    labels = torch.randint(0, 3, (n,), generator=gen)
    images = 0.35 * torch.randn(n, 1, side, side, generator=gen)
    centres = torch.randint(4, side - 4, (n, 2), generator=gen)
    for i in range(n):
        cy, cx = centres[i].tolist()
        dy, dx = yy - cy, xx - cx
        if labels[i] == 0:
            shape = ((dy == 0) & (dx.abs() <= 3)) | ((dx == 0) & (dy.abs() <= 3))
        elif labels[i] == 1:
            shape = ((dy == dx) | (dy == -dx)) & (dy.abs() <= 3)
        else:
            shape = ((dy ** 2 + dx ** 2) >= 4) & ((dy ** 2 + dx ** 2) <= 10)
        images[i, 0][shape] += 1.0
    return images, labels


def separable(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cin, 3, padding=1, groups=cin), nn.Conv2d(cin, cout, 1), nn.BatchNorm2d(cout),
                         nn.ReLU())


class TinyMobileNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU())
        self.blocks = nn.Sequential(separable(16, 32), nn.MaxPool2d(2), separable(32, 32), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).flatten(1))


def save(path: Path, step: int, model, optimizer, scheduler) -> None:
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "step": step}, path)


@daifu.transform
def fit(model, optimizer, scheduler, loader, test, ckpt_dir, start, stop):
    step = 0
    losses, lrs = [], []
    for epoch in range(CFG["epochs"]):
        model.train()
        for xb, yb in loader:
            if step >= stop:
                break
            if step >= start:
                loss = F.cross_entropy(model(xb), yb)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                scheduler.step()
                losses.append(loss.item())
                lrs.append(optimizer.param_groups[0]["lr"])
            step += 1
        save(ckpt_dir / "last.pt", step, model, optimizer, scheduler)
    model.eval()
    with torch.no_grad():
        acc = (model(test[0]).argmax(1) == test[1]).float().mean().item()
    return {"steps": len(losses), "test_acc": acc, "final_lr": lrs[-1] if lrs else None,
            "peak_lr": max(lrs) if lrs else None, "late_lr_max": max(lrs[-16:]) if lrs else None}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    x, y = glyph_set(seed, CFG["n_train"])
    train_set = TensorDataset(x, y)
    loader = DataLoader(train_set, batch_size=CFG["batch_size"], shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    model = TinyMobileNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=CFG["max_lr"], momentum=0.9, nesterov=True)
    steps_per_epoch = len(loader)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=CFG["max_lr"], epochs=CFG["epochs"],
                                                    steps_per_epoch=steps_per_epoch)
    start = 0
    if resume:
        state = torch.load(resume, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        start = state["step"]
    ckpt_dir = Path(workdir) / "ckpt"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    total = CFG["epochs"] * len(loader)
    return fit(model, optimizer, scheduler, loader, glyph_set(seed + 1, 600), ckpt_dir, start,
               total if until is None else until)
