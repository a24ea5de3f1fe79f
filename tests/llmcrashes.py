"""Four crashing training programs, the examples of the LLM-path tests and the prompt-size benchmark.

`train` is a 60-line training function fed images a Linear layer cannot take; `Evaluator.evaluate`
is a decorated method with the same bug; `fit` crashes three calls deep, in `normalise`;
`save_checkpoints` saves into a folder that does not exist, in this file, which never imports the
module that makes folders. Each is small enough to run in milliseconds on a CPU.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


def make_images(batches: int = 3, batch_size: int = 8, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Batches of 8x8 one-channel images and their class (the brighter half of the image)."""
    generator = torch.Generator().manual_seed(seed)
    data = []
    for _ in range(batches):
        images = torch.rand(batch_size, 1, 8, 8, generator=generator)
        labels = (images[:, :, :4].mean((1, 2, 3)) > images[:, :, 4:].mean((1, 2, 3))).long()
        data.append((images, labels))
    return data


def make_mlp(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 2))


def train(model, loader, optimizer, epochs, log, clip=1.0, warmup=2, patience=3, eval_every=1):
    criterion = nn.CrossEntropyLoss(label_smoothing=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.5)
    base_lr = optimizer.param_groups[0]["lr"]
    best_loss = math.inf
    stale_epochs = 0
    step = 0
    for epoch in range(epochs):
        model.train()
        running_loss = 0.0
        correct = 0
        seen = 0
        for images, labels in loader:
            if step < warmup:
                for group in optimizer.param_groups:
                    group["lr"] = base_lr * (step + 1) / warmup
            optimizer.zero_grad()
            logits = model(images)
            loss = criterion(logits, labels)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"loss is {loss.item()} at step {step}")
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            step += 1
            running_loss += loss.item() * len(labels)
            correct += int((logits.argmax(1) == labels).sum())
            seen += len(labels)
        scheduler.step()
        epoch_loss = running_loss / seen
        accuracy = correct / seen
        log.append({"epoch": epoch, "loss": epoch_loss, "accuracy": accuracy, "step": step})
        if epoch % eval_every == 0:
            with torch.no_grad():
                model.eval()
                val_loss = 0.0
                for images, labels in loader[-1:]:
                    val_loss += criterion(model(images.flatten(1)), labels).item()
            if val_loss < best_loss - 1e-4:
                best_loss = val_loss
                stale_epochs = 0
            else:
                stale_epochs += 1
            if stale_epochs >= patience:
                log.append({"epoch": epoch, "stopped": "no improvement"})
                break
    return step


class Evaluator:
    """Holds a model and scores it on batches without tracking gradients."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    @torch.no_grad()
    def evaluate(self, batches):
        correct = 0
        total = 0
        for images, labels in batches:
            logits = self.model(images)
            correct += int((logits.argmax(1) == labels).sum())
            total += len(labels)
        return correct / total


def normalise(features):
    return features / features.norm(dim=1)


def embed(model, images):
    hidden = model[0](images.flatten(1))
    return normalise(hidden)


def run_batch(model, images, labels):
    features = embed(model, images)
    return F.cross_entropy(features[:, :2], labels)


def fit(model, loader, optimizer, log):
    for images, labels in loader:
        optimizer.zero_grad()
        loss = run_batch(model, images, labels)
        loss.backward()
        optimizer.step()
        log.append(loss.item())
    return log


def save_checkpoints(model, folder, epochs):
    for epoch in range(epochs):
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.mul_(0.99)
        torch.save(model.state_dict(), f"{folder}/epoch{epoch}.pt")
    return epochs
