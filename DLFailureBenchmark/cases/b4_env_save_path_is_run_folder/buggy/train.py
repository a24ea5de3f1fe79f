"""A tiny vision transformer (patch embedding + 2 encoder blocks) with a CSV log and periodic checkpoints.

The run folder `runs/vit-tiny/` holds the CSV log; the config's `save_path` was meant to be a
checkpoint file but points at that folder (a trailing slash from a copied command line).
`torch.save` cannot open a directory for writing: the first checkpoint, at step 40, fails.
"""

from __future__ import annotations

import csv
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu

CONFIG = {"run": "vit-tiny", "side": 16, "patch": 4, "dim": 32, "heads": 4, "depth": 2, "classes": 4, "batch": 32,
          "steps": 120, "lr": 2e-3, "log_every": 10, "save_every": 40}


def shapes(gen: torch.Generator, n: int):
    """Four classes of 16x16 images: a bar in one of four orientations, with noise."""
    side = CONFIG["side"]
    labels = torch.randint(0, 4, (n,), generator=gen)
    images = 0.3 * torch.randn(n, 1, side, side, generator=gen)
    offset = torch.randint(3, side - 3, (n,), generator=gen)
    idx = torch.arange(side)
    for i in range(n):
        o, lab = int(offset[i]), int(labels[i])
        if lab == 0:
            images[i, 0, o, :] += 1.0
        elif lab == 1:
            images[i, 0, :, o] += 1.0
        elif lab == 2:
            images[i, 0, idx, idx] += 1.0
        else:
            images[i, 0, idx, side - 1 - idx] += 1.0
    return images, labels


class ViTTiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        n_patches = (CONFIG["side"] // CONFIG["patch"]) ** 2
        self.embed = nn.Conv2d(1, CONFIG["dim"], CONFIG["patch"], stride=CONFIG["patch"])
        self.cls = nn.Parameter(torch.zeros(1, 1, CONFIG["dim"]))
        self.pos = nn.Parameter(0.02 * torch.randn(1, n_patches + 1, CONFIG["dim"]))
        layer = nn.TransformerEncoderLayer(CONFIG["dim"], CONFIG["heads"], 64, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, CONFIG["depth"], enable_nested_tensor=False)
        self.head = nn.Linear(CONFIG["dim"], CONFIG["classes"])

    def forward(self, x):
        tokens = self.embed(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls.expand(len(x), -1, -1), tokens], dim=1) + self.pos
        return self.head(self.blocks(tokens)[:, 0])


@torch.no_grad()
def accuracy(model: nn.Module, data) -> float:
    x, y = data
    return (model(x).argmax(1) == y).float().mean().item()


@daifu.transform
def train(model, optimizer, val, run_dir, save_path, start, stop, seed):
    gen = torch.Generator().manual_seed(seed)
    log_path = run_dir / "log.csv"
    losses, saves = [], 0
    for step in range(start, stop):
        x, y = shapes(gen, CONFIG["batch"])
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % CONFIG["log_every"] == 0:
            with log_path.open("a", newline="") as f:
                csv.writer(f).writerow([step + 1, f"{loss.item():.4f}"])
        if (step + 1) % CONFIG["save_every"] == 0:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step + 1}, save_path)
            saves += 1
    return {"steps": len(losses), "val_acc": accuracy(model, val), "saves": saves}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = ViTTiny()
    optimizer = torch.optim.AdamW(model.parameters(), lr=CONFIG["lr"])
    start = 0
    if resume:
        state = torch.load(resume, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
    run_dir = Path(workdir) / "runs" / CONFIG["run"]
    run_dir.mkdir(parents=True, exist_ok=True)
    save_path = str(run_dir) + "/"
    val = shapes(torch.Generator().manual_seed(seed + 1), 256)
    result = train(model, optimizer, val, run_dir, save_path, start, CONFIG["steps"] if until is None else until, seed)
    log_path = run_dir / "log.csv"
    result["log_rows"] = len(log_path.read_text().splitlines()) if log_path.is_file() else 0
    saved = [p for p in run_dir.rglob("*.pt") if p.is_file()]
    loads = 0
    for path in saved:
        state = torch.load(path, weights_only=True)
        loads += int(ViTTiny().load_state_dict(state["model"]) is not None and state["step"] == result["steps"] + start)
    result["checkpoint_current"] = loads
    return result
