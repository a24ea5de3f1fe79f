"""Realistic set, tensor mismatch: a convolutional GAN whose new label noise builds int64 labels for `BCELoss`.

A complete script training a generator and a discriminator against each other on 32x32 colour
sprites (discs and squares on a dark, noisy ground, generated in code): transposed-convolution
generator and strided-convolution discriminator, both with batch norm, weights drawn from
N(0, 0.02), one Adam optimizer each, a fixed noise batch whose samples are saved every epoch,
and checkpoints of both networks and both optimizers.

The bug: from the second epoch the script adds one-sided label noise, flipping a few of the real
labels to "fake" to keep the discriminator from growing too sure. The labels are built with
`torch.where(flip, 0, 1)`, which makes an int64 tensor, and `BCELoss` wants float targets:
"Found dtype Long but expected Float" at the first batch of the second epoch.

Fixed: float labels, `torch.where(flip, 0.0, 1.0)`.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import torch
from torch import nn

import daifu

CHECKPOINT_NAME = "ckpt.pt"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train a convolutional GAN on generated sprites.")
    parser.add_argument("--images", type=int, default=512, help="training images")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--nz", type=int, default=32, help="size of the latent vector")
    parser.add_argument("--ngf", type=int, default=16, help="generator width")
    parser.add_argument("--ndf", type=int, default=16, help="discriminator width")
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--beta1", type=float, default=0.5, help="Adam's first beta (momentum)")
    parser.add_argument("--flip-from", type=int, default=1, help="the epoch (from 0) label noise starts")
    parser.add_argument("--flip-prob", type=float, default=0.05, help="share of real labels flipped")
    parser.add_argument("--checkpoint-every", type=int, default=10, help="steps between checkpoints")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir", default="runs/sprite_gan")
    parser.add_argument("--resume", default=None)
    parser.add_argument("--until", type=int, default=None, help="stop once this many steps are done in all")
    return parser.parse_args(argv)


def sprites(count: int, seed: int, side: int = 32) -> torch.Tensor:
    """`count` images (count, 3, side, side) in [-1, 1]: one to three coloured discs or squares each."""
    rng = np.random.default_rng(seed)
    ys, xs = np.mgrid[0:side, 0:side] + 0.5
    images = rng.normal(0.1, 0.03, size=(count, 3, side, side))
    for index in range(count):
        for _ in range(rng.integers(1, 4)):
            cx, cy = rng.uniform(6, side - 6, size=2)
            radius = rng.uniform(3, 7)
            if rng.random() < 0.5:
                inside = (xs - cx) ** 2 + (ys - cy) ** 2 <= radius**2
            else:
                inside = (np.abs(xs - cx) <= radius) & (np.abs(ys - cy) <= radius)
            images[index][:, inside] = rng.uniform(0.3, 1.0, size=3)[:, None]
    return torch.from_numpy(np.clip(images, 0.0, 1.0) * 2.0 - 1.0).float()


def up(cin: int, cout: int, first: bool = False) -> list[nn.Module]:
    """Double the side (or, `first`, go from 1x1 to 4x4), then batch norm and ReLU."""
    conv = nn.ConvTranspose2d(cin, cout, 4, 1, 0, bias=False) if first else nn.ConvTranspose2d(cin, cout, 4, 2, 1,
                                                                                                bias=False)
    return [conv, nn.BatchNorm2d(cout), nn.ReLU(True)]


def down(cin: int, cout: int, norm: bool = True) -> list[nn.Module]:
    """Halve the side, then (but on the input layer) batch norm, and a leaky ReLU."""
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, 4, 2, 1, bias=False)]
    if norm:
        layers.append(nn.BatchNorm2d(cout))
    return layers + [nn.LeakyReLU(0.2, inplace=True)]


class Generator(nn.Module):
    """Latent vector (nz, 1, 1) -> 4x4 -> 8x8 -> 16x16 -> 32x32 RGB in [-1, 1]."""

    def __init__(self, nz: int, ngf: int) -> None:
        super().__init__()
        self.net = nn.Sequential(*up(nz, ngf * 4, first=True), *up(ngf * 4, ngf * 2), *up(ngf * 2, ngf),
                                 nn.ConvTranspose2d(ngf, 3, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)


class Discriminator(nn.Module):
    """32x32 RGB -> 16 -> 8 -> 4 -> the probability that the image is real."""

    def __init__(self, ndf: int) -> None:
        super().__init__()
        self.net = nn.Sequential(*down(3, ndf, norm=False), *down(ndf, ndf * 2), *down(ndf * 2, ndf * 4),
                                 nn.Conv2d(ndf * 4, 1, 4, 1, 0, bias=False), nn.Sigmoid())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).view(-1)


def init_weights(module: nn.Module) -> None:
    """Convolutions from N(0, 0.02); batch-norm scales from N(1, 0.02) and shifts at 0."""
    if isinstance(module, (nn.Conv2d, nn.ConvTranspose2d)):
        nn.init.normal_(module.weight, 0.0, 0.02)
    elif isinstance(module, nn.BatchNorm2d):
        nn.init.normal_(module.weight, 1.0, 0.02)
        nn.init.zeros_(module.bias)


def save_checkpoint(path: Path, step: int, net_g: nn.Module, net_d: nn.Module, opt_g: torch.optim.Optimizer,
                    opt_d: torch.optim.Optimizer) -> None:
    torch.save({"step": step, "generator": net_g.state_dict(), "discriminator": net_d.state_dict(),
                "opt_g": opt_g.state_dict(), "opt_d": opt_d.state_dict()}, path)


def load_checkpoint(path: str | None, net_g: nn.Module, net_d: nn.Module, opt_g: torch.optim.Optimizer,
                    opt_d: torch.optim.Optimizer) -> int:
    if path is None:
        return 0
    state = torch.load(path, weights_only=True)
    net_g.load_state_dict(state["generator"])
    net_d.load_state_dict(state["discriminator"])
    opt_g.load_state_dict(state["opt_g"])
    opt_d.load_state_dict(state["opt_d"])
    return int(state["step"])


def batches(images: torch.Tensor, batch_size: int, seed: int, epoch: int) -> list[torch.Tensor]:
    """The epoch's shuffled batches (the order is the epoch's own, so a resumed run sees the same)."""
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed * 1000 + epoch))
    return [images[order[i : i + batch_size]] for i in range(0, len(images), batch_size)]


@daifu.transform
def train(args, net_g, net_d, opt_g, opt_d, images, start_step, workdir):
    criterion = nn.BCELoss()
    fixed_noise = torch.randn(16, args.nz, 1, 1, generator=torch.Generator().manual_seed(args.seed))
    steps_per_epoch = math.ceil(len(images) / args.batch_size)
    stop = args.epochs * steps_per_epoch if args.until is None else args.until
    samples = workdir / "samples"
    samples.mkdir(exist_ok=True)
    step = start_step
    history = []
    for epoch in range(start_step // steps_per_epoch, args.epochs):
        noise_source = torch.Generator().manual_seed(args.seed * 7919 + epoch)
        totals = {"loss_D": 0.0, "loss_G": 0.0, "D_x": 0.0, "D_G_z": 0.0}
        done = 0
        for index, real in enumerate(batches(images, args.batch_size, args.seed, epoch)):
            size = len(real)  # the noise is drawn for skipped batches too: a resumed run gets the same
            noise = torch.randn(size, args.nz, 1, 1, generator=noise_source)
            flip = torch.rand(size, generator=noise_source) < args.flip_prob
            if epoch * steps_per_epoch + index < start_step:
                continue  # trained on before the checkpoint this run resumed from
            if step >= stop:
                break
            # (1) the discriminator: real images towards "real", generated ones towards "fake"
            net_d.zero_grad()
            if epoch >= args.flip_from:
                label = torch.where(flip, 0.0, 1.0)
            else:
                label = torch.ones(size)
            output = net_d(real)
            err_d_real = criterion(output, label)
            err_d_real.backward()
            d_x = output.mean().item()
            fake = net_g(noise)
            output = net_d(fake.detach())
            err_d_fake = criterion(output, torch.zeros(size))
            err_d_fake.backward()
            opt_d.step()
            # (2) the generator: its images should pass for real
            net_g.zero_grad()
            output = net_d(fake)
            err_g = criterion(output, torch.ones(size))
            err_g.backward()
            d_g_z = output.mean().item()
            opt_g.step()
            step += 1
            done += 1
            totals["loss_D"] += (err_d_real + err_d_fake).item()
            totals["loss_G"] += err_g.item()
            totals["D_x"] += d_x
            totals["D_G_z"] += d_g_z
            if step % args.checkpoint_every == 0:
                save_checkpoint(workdir / CHECKPOINT_NAME, step, net_g, net_d, opt_g, opt_d)
        if done:
            history.append({name: value / done for name, value in totals.items()})
        if step >= stop and step % steps_per_epoch != 0:
            break
        with torch.no_grad():
            net_g.eval()
            torch.save(net_g(fixed_noise), samples / f"epoch_{epoch + 1:03d}.pt")
            net_g.train()
    last = history[-1] if history else {}
    return {"steps": step - start_step, **last}


def main(workdir, seed=0, resume=None, until=None):
    argv = ["--workdir", str(workdir), "--seed", str(seed + 7)]
    argv += ["--resume", str(resume)] if resume else []
    argv += ["--until", str(until)] if until is not None else []
    return run(parse_args(argv))


def run(args: argparse.Namespace) -> dict:
    torch.manual_seed(args.seed)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    images = sprites(args.images, args.seed)
    net_g, net_d = Generator(args.nz, args.ngf), Discriminator(args.ndf)
    net_g.apply(init_weights)
    net_d.apply(init_weights)
    opt_d = torch.optim.Adam(net_d.parameters(), lr=args.lr, betas=(args.beta1, 0.999))
    opt_g = torch.optim.Adam(net_g.parameters(), lr=args.lr, betas=(args.beta1, 0.999))
    start_step = load_checkpoint(args.resume, net_g, net_d, opt_g, opt_d)
    return train(args, net_g, net_d, opt_g, opt_d, images, start_step, workdir)


if __name__ == "__main__":
    print(run(parse_args()))
