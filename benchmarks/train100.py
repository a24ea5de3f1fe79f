"""A 100-line training function, the subject of the restore-time benchmark.

`fault` is called once per step; the benchmark makes it raise at a chosen step.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


def build(seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer, list]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    generator = torch.Generator().manual_seed(seed)
    data = []
    for _ in range(16):
        data.append((torch.randn(32, 32, generator=generator), torch.randint(0, 4, (32,), generator=generator)))
    return model, optimizer, data


def train(model, optimizer, data, epochs, fault, checkpoint=None, every=50):
    history = []
    step = 0
    best = math.inf
    warmup = 10
    base_lr = optimizer.param_groups[0]["lr"]
    clip = 1.0
    ema = None
    for epoch in range(epochs):
        model.train()
        running = 0.0
        seen = 0
        correct = 0
        for xb, yb in data:
            if step < warmup:
                scale = (step + 1) / warmup
            else:
                progress = (step - warmup) / max(1, epochs * len(data) - warmup)
                scale = 0.5 * (1 + math.cos(math.pi * progress))
            for group in optimizer.param_groups:
                group["lr"] = base_lr * scale
            xb = xb.float()
            yb = yb.long()
            mean = xb.mean(dim=0, keepdim=True)
            std = xb.std(dim=0, keepdim=True) + 1e-6
            xb = (xb - mean) / std
            fault(step)
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"loss is {loss.item()} at step {step}")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            total_norm = 0.0
            for p in model.parameters():
                if p.grad is not None:
                    total_norm += p.grad.detach().pow(2).sum().item()
            total_norm = math.sqrt(total_norm)
            if total_norm > clip:
                for p in model.parameters():
                    if p.grad is not None:
                        p.grad.mul_(clip / (total_norm + 1e-6))
            optimizer.step()
            value = loss.item()
            ema = value if ema is None else 0.9 * ema + 0.1 * value
            running += value * xb.shape[0]
            seen += xb.shape[0]
            correct += (logits.argmax(dim=1) == yb).sum().item()
            step += 1
            if checkpoint is not None and step % every == 0:
                checkpoint(step, model, optimizer)
            if step % 20 == 0:
                history.append(("log", step, round(ema, 4)))
        epoch_loss = running / max(1, seen)
        accuracy = correct / max(1, seen)
        if epoch_loss < best:
            best = epoch_loss
            history.append(("best", epoch, round(best, 4)))
        model.eval()
        with torch.no_grad():
            val_loss = 0.0
            val_seen = 0
            for xb, yb in data[:4]:
                xb = xb.float()
                mean = xb.mean(dim=0, keepdim=True)
                std = xb.std(dim=0, keepdim=True) + 1e-6
                logits = model((xb - mean) / std)
                val_loss += F.cross_entropy(logits, yb).item() * xb.shape[0]
                val_seen += xb.shape[0]
        history.append(("epoch", epoch, round(epoch_loss, 4), round(accuracy, 4), round(val_loss / val_seen, 4)))
        if accuracy > 0.999:
            history.append(("early-stop", epoch))
            break
    else:
        history.append(("completed", epochs))
    summary = {
        "steps": step,
        "best": best,
        "ema": ema,
        "history": history,
    }
    return summary
