"""A small residual CNN on scanned 32x32 tiles, batched by a DataLoader with the default collate.

One tile of the collection (#77) came from another scanner and is 32x33: one column wider.
The default collate stacks the samples of a batch into one tensor, and the batch that holds
that tile cannot be stacked: the DataLoader raises while the training loop asks it for the batch.

Fixed: `Tiles.__getitem__` crops every tile to the common 32x32 (the extra column is dropped).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

SETTINGS = {"epochs": 3, "batch": 32, "lr": 2e-3, "n": 480, "side": 32, "odd_tile": 77}


class Tiles(Dataset):
    """Tiles with a bright square (label 1) or none (label 0) on textured background."""

    def __init__(self, seed: int, n: int, odd: int | None) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.items = []
        for i in range(n):
            width = SETTINGS["side"] + (1 if i == odd else 0)
            image = 0.4 * torch.randn(1, SETTINGS["side"], width, generator=gen)
            label = int(torch.randint(0, 2, (1,), generator=gen))
            if label:
                y, x = torch.randint(4, 24, (2,), generator=gen).tolist()
                image[0, y:y + 5, x:x + 5] += 1.2
            self.items.append((image, label))

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i):
        image, label = self.items[i]
        return image[:, :SETTINGS["side"], :SETTINGS["side"]], label


class Block(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(c, c, 3, padding=1), nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return F.relu(x + self.c2(F.relu(self.c1(x))))


class SmallResNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(1, 16, 3, stride=2, padding=1)
        self.blocks = nn.Sequential(Block(16), nn.MaxPool2d(2), Block(16))
        self.head = nn.Linear(16, 2)

    def forward(self, x):
        h = self.blocks(F.relu(self.stem(x)))
        return self.head(h.amax(dim=(2, 3)))


@torch.no_grad()
def accuracy(model: nn.Module, data: Tiles) -> float:
    x = torch.stack([img for img, _ in data.items])
    y = torch.tensor([lab for _, lab in data.items])
    return (model(x).argmax(1) == y).float().mean().item()


@daifu.transform
def train(model, optimizer, loader, test_set, ckpt_dir, start, stop):
    step = 0
    losses, samples = [], 0
    for epoch in range(SETTINGS["epochs"]):
        for images, labels in loader:
            if start <= step < stop:
                loss = F.cross_entropy(model(images), labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
                samples += len(labels)
            step += 1
        save_checkpoint(ckpt_dir, min(step, stop), model, optimizer)
    return {"steps": len(losses), "samples": samples, "test_acc": accuracy(model, test_set)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    train_set = Tiles(seed, SETTINGS["n"], SETTINGS["odd_tile"])
    test_set = Tiles(seed + 1, 300, None)
    loader = DataLoader(train_set, batch_size=SETTINGS["batch"], shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    model = SmallResNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=SETTINGS["lr"])
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "ckpt"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    total = SETTINGS["epochs"] * len(loader)
    return train(model, optimizer, loader, test_set, ckpt_dir, start, total if until is None else until)
