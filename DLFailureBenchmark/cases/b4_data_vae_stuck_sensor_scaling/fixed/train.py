"""A VAE for sensor readings (anomaly detection), trained day by day on daily shards.

Each day's rows are min-max scaled with that day's own range, per sensor, so that the
Bernoulli decoder sees values in [0, 1]. On day 3 sensor 5 was stuck at one value all day:
its range is 0, the scaling divides 0 by 0, the batch holds NaN, and the reconstruction
loss, `binary_cross_entropy`, refuses the NaN predictions it leads to.

Fixed: a sensor whose range is 0 is scaled to 0 (its range is taken as 1), as scikit-learn's
MinMaxScaler does for constant features.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

SENSORS, DAYS, ROWS_PER_DAY = 8, 5, 400
TRAINING = {"steps_per_day": 30, "batch": 64, "latent": 3, "lr": 3e-3, "stuck_day": 3, "stuck_sensor": 5}


def daily_shards(seed: int):
    gen = torch.Generator().manual_seed(seed)
    mixing = torch.randn(2, SENSORS, generator=torch.Generator().manual_seed(11))
    shards = []
    for day in range(DAYS):
        state = torch.randn(ROWS_PER_DAY, 2, generator=gen)
        rows = torch.tanh(state @ mixing) * (1 + 0.1 * day) + 0.05 * torch.randn(ROWS_PER_DAY, SENSORS, generator=gen)
        if day == TRAINING["stuck_day"]:
            rows[:, TRAINING["stuck_sensor"]] = 0.731  # the value the sensor froze at
        shards.append(rows)
    return shards


def scale(rows: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    span = high - low
    return (rows - low) / torch.where(span > 0, span, torch.ones_like(span))


class SensorVAE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(SENSORS, 32), nn.ReLU(), nn.Linear(32, 2 * TRAINING["latent"]))
        self.dec = nn.Sequential(nn.Linear(TRAINING["latent"], 32), nn.ReLU(), nn.Linear(32, SENSORS), nn.Sigmoid())

    def forward(self, x, noise):
        mu, logvar = self.enc(x).chunk(2, dim=1)
        z = mu + torch.exp(0.5 * logvar) * noise
        return self.dec(z), mu, logvar


def vae_loss(recon, x, mu, logvar) -> torch.Tensor:
    bce = F.binary_cross_entropy(recon, x, reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu ** 2 - logvar.exp())
    return (bce + kld) / x.size(0)


@torch.no_grad()
def held_out_loss(model: SensorVAE, rows: torch.Tensor) -> float:
    x = scale(rows, rows.min(0).values, rows.max(0).values)
    noise = torch.zeros(len(x), TRAINING["latent"])
    return vae_loss(*model(x, noise)[:1], x, *model(x, noise)[1:]).item()


@daifu.transform
def train(model, optimizer, shards, held_out, ckpt_dir, start, stop, seed):
    gen = torch.Generator().manual_seed(seed)
    losses, days_trained = [], set()
    for step in range(start, stop):
        day = step // TRAINING["steps_per_day"]
        rows = shards[day]
        idx = torch.randint(0, len(rows), (TRAINING["batch"],), generator=gen)
        noise = torch.randn(TRAINING["batch"], TRAINING["latent"], generator=gen)
        x = scale(rows[idx], rows.min(0).values, rows.max(0).values)
        recon, mu, logvar = model(x, noise)
        loss = vae_loss(recon, x, mu, logvar)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        days_trained.add(day)
        if (step + 1) % TRAINING["steps_per_day"] == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return {"steps": len(losses), "days_trained": len(days_trained), "held_out_loss": held_out_loss(model, held_out)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    shards = daily_shards(seed)
    held_out = daily_shards(seed + 1)[0]
    model = SensorVAE()
    optimizer = torch.optim.Adam(model.parameters(), lr=TRAINING["lr"])
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "ckpt"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    total = DAYS * TRAINING["steps_per_day"]
    return train(model, optimizer, shards, held_out, ckpt_dir, start, total if until is None else until, seed)
