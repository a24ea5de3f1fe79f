"""Exceptional data (colour-image CNN): a few scanned photos in the album are single-channel greyscale.

Most images decode to 3x16x16; the scans decode to 1x16x16. The script batches samples itself
with `torch.stack`, which refuses tensors of different sizes at the first batch holding a scan.

Fixed: the album gives every image three channels (a greyscale scan repeated over R, G and B, as
`convert("RGB")` does).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import BatchSampler, RandomSampler

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

OPTIONS = {"images": 720, "batch": 24, "epochs": 2, "lr": 3e-3, "checkpoint_every": 20, "classes": 4}


class Album:
    """Decoded photos as (C, 16, 16) tensors in [0, 1]; every 37th one was scanned in greyscale."""

    def __init__(self, seed, count):
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, OPTIONS["classes"], (count,), generator=g)
        tint = torch.tensor([[0.9, 0.3, 0.2], [0.2, 0.8, 0.3], [0.2, 0.3, 0.9], [0.8, 0.8, 0.2]])
        base = tint[self.labels][:, :, None, None] * torch.ones(count, 3, 16, 16)
        shape = torch.linspace(0, 1, 16)[None, None, :, None] * (self.labels[:, None, None, None] % 2)
        self.pixels = (base + shape + 0.35 * torch.randn(count, 3, 16, 16, generator=g)).clamp(0, 1)
        self.greyscale = torch.arange(count) % 37 == 5

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        image = self.pixels[index]
        if self.greyscale[index]:
            image = image.mean(0, keepdim=True)  # a scan decodes to one channel
        image = image.expand(3, -1, -1)
        return {"image": image, "label": int(self.labels[index])}


class TinyConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 12, 3, padding=1)
        self.conv2 = nn.Conv2d(12, 16, 3, padding=1)
        self.out = nn.Linear(16 * 4 * 4, OPTIONS["classes"])

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.out(x.flatten(1))


@torch.no_grad()
def evaluate(model, album):
    images = torch.stack([album[i]["image"].expand(3, -1, -1) for i in range(len(album))])
    return float((model(images).argmax(1) == album.labels).float().mean())


@daifu.transform
def train(model, optimizer, album, held_out, ckpt_dir, seed, start, stop):
    batches = BatchSampler(RandomSampler(album, generator=torch.Generator().manual_seed(seed)),
                           OPTIONS["batch"], drop_last=True)
    step = 0
    losses = []
    images_seen = 0
    for epoch in range(OPTIONS["epochs"]):
        for indices in batches:
            if step >= stop:
                break
            if step < start:
                step += 1
                continue
            samples = [album[i] for i in indices]
            images = torch.stack([sample["image"] for sample in samples])
            labels = torch.tensor([sample["label"] for sample in samples])
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            images_seen += len(images)
            step += 1
            if step % OPTIONS["checkpoint_every"] == 0:
                save_checkpoint(ckpt_dir, step, model, optimizer)
    return {"steps": len(losses), "final_loss": sum(losses[-10:]) / 10, "accuracy": evaluate(model, held_out),
            "images_seen": images_seen}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    album, held_out = Album(seed, OPTIONS["images"]), Album(seed + 1, 240)
    model = TinyConvNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=OPTIONS["lr"])
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    total = OPTIONS["epochs"] * (len(album) // OPTIONS["batch"])
    return train(model, optimizer, album, held_out, ckpt_dir, seed, start, total if until is None else until)
