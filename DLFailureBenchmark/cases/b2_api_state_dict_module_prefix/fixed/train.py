"""Student classifier on noisy labels, distilled from a teacher after 50 steps.

The student (an MLP) learns ten classes of 24-dimensional samples from a crowd-labelled stream in
which 45% of the labels are wrong. From step 50 it also matches the soft predictions (T = 2) of a
teacher that another team trained on clean labels with their multi-GPU job and published as
`teacher.pt`; the teacher is loaded when distillation starts. Scored on 1000 clean held-out samples.

Fixed: the teacher's state dict was saved from an `nn.DataParallel` wrapper, so its keys start with
`module.`; the prefix is stripped before loading it into the plain teacher network.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

CLASSES, DIM = 10, 24
STEPS, BATCH, CKPT_EVERY = 160, 64, 20
DISTILL_FROM, T, NOISE = 50, 2.0, 0.45


def centres():
    return torch.randn(CLASSES, DIM, generator=torch.Generator().manual_seed(51)) * 0.6


def samples(g, count, noise=0.0):
    y = torch.randint(0, CLASSES, (count,), generator=g)
    x = centres()[y] + torch.randn(count, DIM, generator=g)
    wrong = torch.rand(count, generator=g) < noise
    return x, torch.where(wrong, torch.randint(0, CLASSES, (count,), generator=g), y)


def teacher_net():
    return nn.Sequential(nn.Linear(DIM, CLASSES))


def publish_teacher(path):
    """The other team's teacher, as their job saved it (a linear model on the class centres)."""
    teacher = teacher_net()
    with torch.no_grad():
        teacher[0].weight.copy_(centres() * 3.0)
        teacher[0].bias.copy_(-1.5 * (centres() ** 2).sum(1))
    torch.save(nn.DataParallel(teacher).state_dict(), path)


@daifu.transform
def train(model, optimizer, teacher_path, test, ckpt_dir, start, stop, seed):
    teacher = None
    for step in range(start, stop):
        x, y = samples(torch.Generator().manual_seed(seed * 100_003 + step), BATCH, NOISE)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        if step >= DISTILL_FROM:
            if teacher is None:
                teacher = teacher_net()
                teacher.load_state_dict({k.removeprefix("module."): v for k, v in torch.load(teacher_path, weights_only=True).items()})
                teacher.eval()
            with torch.no_grad():
                soft = F.softmax(teacher(x) / T, dim=1)
            distill = F.kl_div(F.log_softmax(logits / T, dim=1), soft, reduction="batchmean") * T * T
            loss = 0.3 * loss + 0.7 * distill
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    with torch.no_grad():
        accuracy = (model(test[0]).argmax(1) == test[1]).float().mean().item()
        teacher_accuracy = (teacher(test[0]).argmax(1) == test[1]).float().mean().item() if teacher else 0.0
    return {"steps": stop - start, "accuracy": accuracy, "teacher_accuracy": teacher_accuracy}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(DIM, 64), nn.ReLU(), nn.Linear(64, CLASSES))
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    teacher_path = Path(workdir) / "teacher.pt"
    publish_teacher(teacher_path)
    test = samples(torch.Generator().manual_seed(seed * 7 + 8), 1000)
    return train(model, optimizer, teacher_path, test, ckpt_dir, start, STEPS if until is None else until, seed)
