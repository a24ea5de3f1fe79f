"""Realistic set, GPU contention: a CNN classifier whose batch transfer meets a device another job holds.

A complete training script for a small convolutional classifier of 28x28 glyphs: options, a
network of conv-BatchNorm blocks, SGD with momentum and a per-epoch step decay, label smoothing,
an evaluation on the test split after each epoch, and checkpoints (`ckpt.pt`) every few steps
and at each epoch's end, from which a run can be resumed mid-epoch.

What goes wrong is the environment, not the code: the cluster's GPUs run in exclusive-process
mode, and at step 18 another job takes this one for half a second; moving the batch to the
device fails with "CUDA-capable device(s) is/are busy or unavailable" (simulated on the CPU).

Fixed: the transfer waits and tries again while the device is busy (`to_device`).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader

import daifu
from DLFailureBenchmark import faults
from DLFailureBenchmark.hosts.glyphs import CLASSES, Glyphs

CHECKPOINT_NAME = "ckpt.pt"
MEAN, STD = 0.18, 0.26  # of the glyphs' pixels, measured once on the training split


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train a small CNN on the Glyphs dataset.")
    parser.add_argument("--train-size", type=int, default=800, help="training images")
    parser.add_argument("--test-size", type=int, default=500, help="test images")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--test-batch-size", type=int, default=250)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.05, help="initial learning rate")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--weight-decay", type=float, default=5e-4)
    parser.add_argument("--lr-decay", type=float, default=0.6, help="learning-rate factor after each epoch")
    parser.add_argument("--label-smoothing", type=float, default=0.05)
    parser.add_argument("--width", type=int, default=16, help="channels of the first block")
    parser.add_argument("--checkpoint-every", type=int, default=10, help="steps between checkpoints")
    parser.add_argument("--device", default="cpu", help='"cuda" on the cluster')
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workdir", default="runs/glyph_cnn")
    parser.add_argument("--resume", default=None, help="a checkpoint to go on from")
    parser.add_argument("--until", type=int, default=None, help="stop once this many steps are done in all")
    return parser.parse_args(argv)


class ConvBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and ReLU, then a 2x2 max-pool: half the side, `cout` channels."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class GlyphNet(nn.Module):
    """28x28 -> two conv blocks (14x14, 7x7) -> a dropout-regularised two-layer classifier."""

    def __init__(self, width: int = 16, classes: int = CLASSES, dropout: float = 0.25) -> None:
        super().__init__()
        self.features = nn.Sequential(ConvBlock(1, width), ConvBlock(width, 2 * width))
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Dropout(dropout), nn.Linear(2 * width * 7 * 7, 128), nn.ReLU(inplace=True),
            nn.Dropout(dropout), nn.Linear(128, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def to_device(tensor: torch.Tensor, device: torch.device, attempts: int = 10, wait: float = 0.2) -> torch.Tensor:
    """`tensor.to(device)`, waiting `wait` s and trying again while another process holds the device."""
    for attempt in range(attempts):
        try:
            return tensor.to(device)
        except RuntimeError as error:
            if "busy or unavailable" not in str(error) or attempt == attempts - 1:
                raise
            time.sleep(wait)
    raise AssertionError("unreachable")


def normalize(image: torch.Tensor) -> torch.Tensor:
    return (image - MEAN) / STD


def datasets(args: argparse.Namespace) -> tuple[Glyphs, Glyphs]:
    train_set = Glyphs(args.train_size, train=True, seed=args.seed, transform=normalize)
    test_set = Glyphs(args.test_size, train=False, seed=args.seed, transform=normalize)
    return train_set, test_set


def epoch_loader(train_set: Glyphs, args: argparse.Namespace, epoch: int) -> DataLoader:
    """The epoch's shuffled batches; the order depends on the epoch only, so a resumed run sees the same."""
    order = torch.Generator().manual_seed(args.seed * 1000 + epoch)
    return DataLoader(train_set, batch_size=args.batch_size, shuffle=True, generator=order)


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader, device: torch.device) -> tuple[float, float]:
    """Mean cross-entropy and accuracy over `loader`."""
    model.eval()
    total_loss, correct, count = 0.0, 0, 0
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        logits = model(images)
        total_loss += F.cross_entropy(logits, labels, reduction="sum").item()
        correct += int((logits.argmax(dim=1) == labels).sum())
        count += len(labels)
    model.train()
    return total_loss / count, correct / count


def save_checkpoint(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer,
                    scheduler: torch.optim.lr_scheduler.LRScheduler, step: int, best_accuracy: float) -> None:
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "step": step, "best_accuracy": best_accuracy}, path)


def load_checkpoint(path: str | None, model: nn.Module, optimizer: torch.optim.Optimizer,
                    scheduler: torch.optim.lr_scheduler.LRScheduler) -> tuple[int, float]:
    """Restore the training state from `path`; the steps it had done and its best accuracy (0 and 0 without one)."""
    if path is None:
        return 0, 0.0
    state = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    return int(state["step"]), float(state["best_accuracy"])


@daifu.transform
def train(args, model, optimizer, scheduler, train_set, test_loader, device, start_step, best_accuracy, ckpt_path):
    steps_per_epoch = math.ceil(len(train_set) / args.batch_size)
    total_steps = args.epochs * steps_per_epoch
    stop = total_steps if args.until is None else min(args.until, total_steps)
    step = start_step
    losses, history = [], []
    for epoch in range(start_step // steps_per_epoch, args.epochs):
        epoch_losses = []
        for index, (images, labels) in enumerate(epoch_loader(train_set, args, epoch)):
            if epoch * steps_per_epoch + index < start_step:
                continue  # trained on before the checkpoint this run resumed from
            if step >= stop:
                break
            images, labels = to_device(images, device), to_device(labels, device)
            logits = model(images)
            loss = F.cross_entropy(logits, labels, label_smoothing=args.label_smoothing)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            losses.append(loss.item())
            epoch_losses.append(loss.item())
            if step % args.checkpoint_every == 0:
                save_checkpoint(ckpt_path, model, optimizer, scheduler, step, best_accuracy)
        if step >= stop and step % steps_per_epoch != 0:
            return {"steps": len(losses), "train_loss": sum(losses) / max(len(losses), 1)}
        scheduler.step()
        test_loss, accuracy = evaluate(model, test_loader, device)
        best_accuracy = max(best_accuracy, accuracy)
        history.append({"epoch": epoch + 1, "train_loss": sum(epoch_losses) / max(len(epoch_losses), 1),
                        "test_loss": test_loss, "accuracy": accuracy, "lr": scheduler.get_last_lr()[0]})
        save_checkpoint(ckpt_path, model, optimizer, scheduler, step, best_accuracy)
        if step >= stop:
            break
    last = history[-1] if history else {"train_loss": float("nan"), "test_loss": float("nan"), "accuracy": 0.0}
    return {"steps": len(losses), "train_loss": last["train_loss"], "test_loss": last["test_loss"],
            "accuracy": last["accuracy"], "best_accuracy": best_accuracy, "epochs": len(history)}


def main(workdir, seed=0, resume=None, until=None):
    argv = ["--workdir", str(workdir), "--seed", str(seed)]
    argv += ["--resume", str(resume)] if resume else []
    argv += ["--until", str(until)] if until is not None else []
    return run(parse_args(argv))


def run(args: argparse.Namespace) -> dict:
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    train_set, test_set = datasets(args)
    test_loader = DataLoader(test_set, batch_size=args.test_batch_size)
    model = GlyphNet(args.width).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                                weight_decay=args.weight_decay, nesterov=True)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=args.lr_decay)
    start_step, best_accuracy = load_checkpoint(args.resume, model, optimizer, scheduler)
    # the other job: it takes the GPU at the first transfer of step 18 (two transfers a step) for 0.5 s
    faults.flaky("torch.Tensor.to", fail_on={2 * (18 - start_step) + 1}, error=faults.device_busy,
                 caller=__file__, seconds=0.5)
    return train(args, model, optimizer, scheduler, train_set, test_loader, device, start_step, best_accuracy,
                 workdir / CHECKPOINT_NAME)


if __name__ == "__main__":
    print(run(parse_args()))
