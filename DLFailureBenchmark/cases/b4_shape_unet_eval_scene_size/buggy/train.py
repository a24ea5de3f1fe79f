"""Segmentation with a small U-Net: trained on 32x32 tiles, validated on whole 44x44 scenes.

Training crops fixed-size tiles, so every feature map halves evenly. The periodic validation
runs on the full scenes instead; 44 -> 22 -> 11 -> 5 after three poolings, and the decoder's
upsampled 10x10 map cannot be concatenated with the 11x11 skip connection.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

CONFIG = {"steps": 90, "batch": 8, "tile": 32, "scene": 44, "lr": 3e-3, "val_every": 30, "ckpt_every": 30,
          "n_scenes": 6}


def make_scene(gen: torch.Generator, side: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A noisy image with a few bright discs; the mask marks the discs."""
    yy, xx = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    mask = torch.zeros(side, side, dtype=torch.long)
    for _ in range(3):
        cy, cx = torch.randint(4, side - 4, (2,), generator=gen)
        r = int(torch.randint(3, 7, (1,), generator=gen))
        mask[(yy - cy) ** 2 + (xx - cx) ** 2 <= r * r] = 1
    image = mask.float() * 0.8 + 0.35 * torch.randn(side, side, generator=gen)
    return image.unsqueeze(0), mask


def tile_batch(seed: int, step: int, batch: int, tile: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed * 7919 + step)
    pairs = [make_scene(gen, tile) for _ in range(batch)]
    return torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])


def block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(), nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU())


class Up(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cin // 2, 2, stride=2)
        self.conv = block(cin // 2 + cout, cout)

    def forward(self, x, skip):
        x = self.up(x)
        return self.conv(torch.cat([skip, x], dim=1))


class UNet(nn.Module):
    def __init__(self, classes: int = 2) -> None:
        super().__init__()
        self.d1, self.d2, self.d3 = block(1, 8), block(8, 16), block(16, 32)
        self.bottom = block(32, 32)
        self.u3, self.u2, self.u1 = Up(32, 32), Up(32, 16), Up(16, 8)
        self.head = nn.Conv2d(8, classes, 1)

    def forward(self, x):
        s1 = self.d1(x)
        s2 = self.d2(F.max_pool2d(s1, 2))
        s3 = self.d3(F.max_pool2d(s2, 2))
        x = self.bottom(F.max_pool2d(s3, 2))
        return self.head(self.u1(self.u2(self.u3(x, s3), s2), s1))


@torch.no_grad()
def evaluate(model: nn.Module, scenes: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """Mean foreground IoU over the validation scenes, each run whole."""
    model.eval()
    ious = []
    for image, mask in scenes:
        pred = model(image.unsqueeze(0)).argmax(1)[0]
        inter = ((pred == 1) & (mask == 1)).sum().item()
        union = ((pred == 1) | (mask == 1)).sum().item()
        ious.append(inter / max(union, 1))
    model.train()
    return sum(ious) / len(ious)


@daifu.transform
def train(model, optimizer, scenes, ckpt_dir, start, stop, seed):
    history = []
    losses = []
    for step in range(start, stop):
        x, y = tile_batch(seed, step, CONFIG["batch"], CONFIG["tile"])
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % CONFIG["val_every"] == 0:
            iou = evaluate(model, scenes)
            history.append({"step": step + 1, "iou": iou})
        if (step + 1) % CONFIG["ckpt_every"] == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return {"steps": len(losses), "final_loss": losses[-1] if losses else None,
            "iou": evaluate(model, scenes), "val_checks": len(history)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = UNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=CONFIG["lr"])
    start = load_checkpoint(resume, model, optimizer)
    gen = torch.Generator().manual_seed(seed + 1000)
    scenes = [make_scene(gen, CONFIG["scene"]) for _ in range(CONFIG["n_scenes"])]
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, scenes, ckpt_dir, start, CONFIG["steps"] if until is None else until, seed)
