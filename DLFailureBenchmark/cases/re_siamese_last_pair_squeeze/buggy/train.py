"""Realistic set, tensor mismatch: a siamese network whose `.squeeze()` also drops the batch of a one-pair batch.

A complete script learning whether two 28x28 glyphs show the same class: a pair sampler that
draws, for every training image, a partner of the same class or of another (half and half, anew
each epoch), a convolutional tower with batch norm shared by both images, a head comparing the
two embeddings, binary cross-entropy, Adam with a per-epoch decay, a test on fixed pairs of the
test split after each epoch, and checkpoints.

The bug: the head's output (batch, 1) is flattened with `.squeeze()`, which removes every
dimension of size 1. The training split has 833 images, so each epoch ends with a batch of one
pair; its output loses the batch dimension too, and `BCELoss` gets an input of size [] against a
target of size [1]: "Using a target size (torch.Size([1])) that is different to the input size".
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import daifu
from DLFailureBenchmark.hosts.glyphs import CLASSES, Glyphs

CHECKPOINT_NAME = "ckpt.pt"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="A siamese network telling same-class glyph pairs apart.")
    parser.add_argument("--train-size", type=int, default=833)
    parser.add_argument("--test-size", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--test-batch-size", type=int, default=100)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--embedding", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--gamma", type=float, default=0.7, help="learning-rate factor after each epoch")
    parser.add_argument("--checkpoint-every", type=int, default=5, help="steps between checkpoints")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--workdir", default="runs/glyph_siamese")
    parser.add_argument("--resume", default=None)
    parser.add_argument("--until", type=int, default=None, help="stop once this many steps are done in all")
    return parser.parse_args(argv)


class PairSampler:
    """Pairs of indices of one dataset: each image once as the first of a pair, its partner drawn anew.

    With probability one half the partner is another image of the same class (target 1), else an
    image of a different class (target 0).
    """

    def __init__(self, targets: torch.Tensor) -> None:
        self.by_class = [torch.nonzero(targets == c).flatten() for c in range(CLASSES)]
        self.targets = targets

    def pairs(self, generator: torch.Generator) -> list[tuple[int, int, float]]:
        result = []
        for first in torch.randperm(len(self.targets), generator=generator).tolist():
            label = int(self.targets[first])
            same = bool(torch.rand(1, generator=generator) < 0.5)
            if same:
                pool = self.by_class[label]
            else:
                other = (label + int(torch.randint(1, CLASSES, (1,), generator=generator))) % CLASSES
                pool = self.by_class[other]
            second = int(pool[torch.randint(len(pool), (1,), generator=generator)])
            result.append((first, second, 1.0 if same else 0.0))
        return result


class PairDataset(Dataset):
    """The images of `pairs` from `images`, and whether they show the same class, as float targets."""

    def __init__(self, images: Glyphs, pairs: list[tuple[int, int, float]]) -> None:
        self.images, self.pairs = images, pairs

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        first, second, target = self.pairs[index]
        return self.images[first][0], self.images[second][0], torch.tensor(target)


class Tower(nn.Module):
    """28x28 -> conv-BN-ReLU-pool (14x14) -> conv-BN-ReLU-pool (7x7) -> an embedding."""

    def __init__(self, embedding: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        )
        self.project = nn.Linear(32 * 7 * 7, embedding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.project(self.features(x).flatten(1))


class SiameseNetwork(nn.Module):
    """One tower for both images; the head reads |a - b| and a * b and gives P(same class), shape (batch, 1)."""

    def __init__(self, embedding: int) -> None:
        super().__init__()
        self.tower = Tower(embedding)
        self.head = nn.Sequential(nn.Linear(2 * embedding, 32), nn.ReLU(inplace=True), nn.Linear(32, 1), nn.Sigmoid())

    def forward(self, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
        a, b = self.tower(first), self.tower(second)
        return self.head(torch.cat([(a - b).abs(), a * b], dim=1))


@torch.no_grad()
def test(model: SiameseNetwork, loader: DataLoader, criterion: nn.Module) -> tuple[float, float]:
    """Mean loss and accuracy (threshold 0.5) over the test pairs."""
    model.eval()
    total, correct, count = 0.0, 0, 0
    for first, second, targets in loader:
        outputs = model(first, second).squeeze()
        total += criterion(outputs, targets).item() * len(targets)
        correct += int(((outputs > 0.5).float() == targets).sum())
        count += len(targets)
    model.train()
    return total / count, correct / count


def save_checkpoint(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer,
                    scheduler: torch.optim.lr_scheduler.LRScheduler, step: int) -> None:
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "step": step}, path)


@daifu.transform
def train(model, optimizer, scheduler, train_set, test_loader, args, start_step, workdir):
    criterion = nn.BCELoss()
    sampler = PairSampler(train_set.targets)
    steps_per_epoch = math.ceil(len(train_set) / args.batch_size)
    stop = args.epochs * steps_per_epoch if args.until is None else args.until
    step = start_step
    history = []
    for epoch in range(start_step // steps_per_epoch, args.epochs):
        pairs = sampler.pairs(torch.Generator().manual_seed(args.seed * 1000 + epoch))
        loader = DataLoader(PairDataset(train_set, pairs), batch_size=args.batch_size)
        epoch_loss, seen = 0.0, 0
        for index, (images_1, images_2, targets) in enumerate(loader):
            if epoch * steps_per_epoch + index < start_step:
                continue  # trained on before the checkpoint this run resumed from
            if step >= stop:
                break
            optimizer.zero_grad()
            outputs = model(images_1, images_2).squeeze()
            loss = criterion(outputs, targets)
            loss.backward()
            optimizer.step()
            step += 1
            epoch_loss += loss.item() * len(targets)
            seen += len(targets)
            if step % args.checkpoint_every == 0:
                save_checkpoint(workdir / CHECKPOINT_NAME, model, optimizer, scheduler, step)
        if step >= stop and step % steps_per_epoch != 0:
            return {"steps": step - start_step}
        scheduler.step()
        test_loss, accuracy = test(model, test_loader, criterion)
        history.append({"epoch": epoch + 1, "train_loss": epoch_loss / max(seen, 1), "test_loss": test_loss,
                        "accuracy": accuracy})
        save_checkpoint(workdir / CHECKPOINT_NAME, model, optimizer, scheduler, step)
        if step >= stop:
            break
    last = history[-1]
    return {"steps": step - start_step, "train_loss": last["train_loss"], "test_loss": last["test_loss"],
            "accuracy": last["accuracy"]}


def main(workdir, seed=0, resume=None, until=None):
    argv = ["--workdir", str(workdir), "--seed", str(5 + seed)]
    argv += ["--resume", str(resume)] if resume else []
    argv += ["--until", str(until)] if until is not None else []
    return run(parse_args(argv))


def run(args: argparse.Namespace) -> dict:
    torch.manual_seed(args.seed)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    train_set = Glyphs(args.train_size, train=True, seed=args.seed)
    test_set = Glyphs(args.test_size, train=False, seed=args.seed)
    test_pairs = PairSampler(test_set.targets).pairs(torch.Generator().manual_seed(args.seed))
    test_loader = DataLoader(PairDataset(test_set, test_pairs), batch_size=args.test_batch_size)
    model = SiameseNetwork(args.embedding)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=args.gamma)
    start_step = 0
    if args.resume:
        state = torch.load(args.resume, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        start_step = int(state["step"])
    return train(model, optimizer, scheduler, train_set, test_loader, args, start_step, workdir)


if __name__ == "__main__":
    print(run(parse_args()))
