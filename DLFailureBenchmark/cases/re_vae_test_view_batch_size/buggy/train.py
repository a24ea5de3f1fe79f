"""Realistic set, API misuse: a VAE whose test pass reshapes with the training batch size.

A complete variational autoencoder script on 28x28 glyphs: a fully connected encoder giving the
mean and log-variance of a 16-dimensional latent code, the reparameterisation trick, a decoder
back to pixel probabilities, a loss of binary cross-entropy plus the KL divergence (weighted by
`--beta`), Adam, a test pass after each epoch that also saves a strip of originals beside their
reconstructions, samples decoded from the prior, and checkpoints.

The bug: `test` puts the first batch's reconstructions into image shape with
`recon.view(args.batch_size, 1, 28, 28)`. The test split (100 images) is smaller than one batch
of 128, so the test batch has 100 images and the view fails at the end of the first epoch.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader

import daifu
from DLFailureBenchmark.hosts.glyphs import SIDE, Glyphs

CHECKPOINT_NAME = "ckpt.pt"
PIXELS = SIDE * SIDE


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="A variational autoencoder on the Glyphs dataset.")
    parser.add_argument("--train-size", type=int, default=2048)
    parser.add_argument("--test-size", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--latent", type=int, default=16)
    parser.add_argument("--beta", type=float, default=1.0, help="weight of the KL term")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--show", type=int, default=8, help="images in the reconstruction strip")
    parser.add_argument("--checkpoint-every", type=int, default=10, help="steps between checkpoints")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--workdir", default="runs/glyph_vae")
    parser.add_argument("--resume", default=None)
    parser.add_argument("--until", type=int, default=None, help="stop once this many steps are done in all")
    return parser.parse_args(argv)


class VAE(nn.Module):
    """784 -> hidden -> (mu, log variance) of the latent code; latent -> hidden -> 784 pixel probabilities."""

    def __init__(self, hidden: int, latent: int) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(PIXELS, hidden), nn.ReLU())
        self.to_mu = nn.Linear(hidden, latent)
        self.to_logvar = nn.Linear(hidden, latent)
        self.decoder = nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(), nn.Linear(hidden, PIXELS), nn.Sigmoid())

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.encoder(x.view(-1, PIXELS))
        return self.to_mu(h), self.to_logvar(h)

    def sample(self, mu: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
        """A code drawn from N(mu, exp(logvar)) as mu + sigma * noise, so gradients reach mu and sigma;
        the mean itself when evaluating."""
        if not self.training:
            return mu
        return mu + torch.exp(0.5 * logvar) * torch.randn_like(mu)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mu, logvar = self.encode(x)
        return self.decoder(self.sample(mu, logvar)), mu, logvar


def vae_loss(recon: torch.Tensor, x: torch.Tensor, mu: torch.Tensor, logvar: torch.Tensor,
             beta: float) -> torch.Tensor:
    """Reconstruction cross-entropy plus `beta` times KL(q(z|x) || N(0, I)), summed over the batch."""
    reconstruction = F.binary_cross_entropy(recon, x.view(-1, PIXELS), reduction="sum")
    kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return reconstruction + beta * kl


@daifu.transform
def test(model, loader, args, epoch, results):
    """The mean test loss per image; the first batch's originals and reconstructions saved side by side."""
    model.eval()
    total = 0.0
    with torch.no_grad():
        for index, (data, _) in enumerate(loader):
            recon, mu, logvar = model(data)
            total += vae_loss(recon, data, mu, logvar, args.beta).item()
            if index == 0:
                n = min(args.show, data.size(0))
                comparison = torch.cat([data[:n], recon.view(args.batch_size, 1, SIDE, SIDE)[:n]])
                torch.save(comparison, results / f"reconstruction_{epoch}.pt")
    model.train()
    return total / len(loader.dataset)


def save_checkpoint(path: Path, model: VAE, optimizer: torch.optim.Optimizer, step: int) -> None:
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, path)


@daifu.transform
def fit(model, optimizer, train_set, test_loader, args, start_step, workdir):
    results = workdir / "results"
    results.mkdir(exist_ok=True)
    steps_per_epoch = math.ceil(len(train_set) / args.batch_size)
    stop = args.epochs * steps_per_epoch if args.until is None else args.until
    step = start_step
    history = []
    for epoch in range(1 + start_step // steps_per_epoch, args.epochs + 1):
        order = torch.Generator().manual_seed(args.seed * 1000 + epoch)
        loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, generator=order)
        train_loss, seen = 0.0, 0
        for index, (data, _) in enumerate(loader):
            if (epoch - 1) * steps_per_epoch + index < start_step:
                continue  # trained on before the checkpoint this run resumed from
            if step >= stop:
                break
            torch.manual_seed(args.seed * 100_003 + step)  # the step's own reparameterisation noise
            recon, mu, logvar = model(data)
            loss = vae_loss(recon, data, mu, logvar, args.beta)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            train_loss += loss.item()
            seen += len(data)
            if step % args.checkpoint_every == 0:
                save_checkpoint(workdir / CHECKPOINT_NAME, model, optimizer, step)
        if step >= stop and step % steps_per_epoch != 0:
            return {"steps": step - start_step}
        test_loss = test(model, test_loader, args, epoch, results)
        with torch.no_grad():
            prior = torch.randn(64, args.latent, generator=torch.Generator().manual_seed(args.seed))
            torch.save(model.decoder(prior).view(64, 1, SIDE, SIDE), results / f"sample_{epoch}.pt")
        history.append({"epoch": epoch, "train_loss": train_loss / max(seen, 1), "test_loss": test_loss})
        save_checkpoint(workdir / CHECKPOINT_NAME, model, optimizer, step)
        if step >= stop:
            break
    last = history[-1]
    return {"steps": step - start_step, "train_loss": last["train_loss"], "test_loss": last["test_loss"]}


def main(workdir, seed=0, resume=None, until=None):
    argv = ["--workdir", str(workdir), "--seed", str(11 + seed)]
    argv += ["--resume", str(resume)] if resume else []
    argv += ["--until", str(until)] if until is not None else []
    return run(parse_args(argv))


def run(args: argparse.Namespace) -> dict:
    torch.manual_seed(args.seed)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    train_set = Glyphs(args.train_size, train=True, seed=args.seed)
    test_loader = DataLoader(Glyphs(args.test_size, train=False, seed=args.seed), batch_size=args.batch_size)
    model = VAE(args.hidden, args.latent)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    start_step = 0
    if args.resume:
        state = torch.load(args.resume, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_step = int(state["step"])
    return fit(model, optimizer, train_set, test_loader, args, start_step, workdir)


if __name__ == "__main__":
    print(run(parse_args()))
