"""Two-stage training: a masked-feature autoencoder pre-trains an encoder, then a classifier fine-tunes it.

Stage 1 runs the autoencoder wrapped in `nn.DataParallel` (as on the multi-GPU box; on one
device the wrapper just calls the module) and saves `autoencoder.state_dict()`, whose keys all
start with `module.`. Stage 2 builds a plain encoder and loads the encoder's weights from that
file by their plain names: `load_state_dict` finds none of them and raises, 60 steps in.

Fixed: stage 1 saves the wrapped module's state, `autoencoder.module.state_dict()`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu

STAGES = {"pretrain_steps": 60, "finetune_steps": 60, "batch": 64, "lr": 2e-3, "mask_rate": 0.3, "labelled": 96}


def unlabelled_rows(seed: int, n: int):
    gen = torch.Generator().manual_seed(seed)
    factors = torch.randn(n, 3, generator=gen)
    loading = torch.randn(3, 12, generator=torch.Generator().manual_seed(3))
    x = factors @ loading + 0.2 * torch.randn(n, 12, generator=gen)
    y = (factors[:, 0] + 0.5 * factors[:, 1] > 0).long()
    return x, y


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 8))

    def forward(self, x):
        return self.net(x)


class AutoEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = Encoder()
        self.decoder = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 12))

    def forward(self, x):
        return self.decoder(self.encoder(x))


def encoder_state(path: Path) -> dict[str, torch.Tensor]:
    state = torch.load(path, weights_only=True)["model"]
    return {k[len("encoder."):]: v for k, v in state.items() if k.startswith("encoder.")}


@daifu.transform
def run(workdir, x_all, x_lab, y_lab, x_test, y_test, seed, stop):
    gen = torch.Generator().manual_seed(seed)
    autoencoder = nn.DataParallel(AutoEncoder())
    opt = torch.optim.Adam(autoencoder.parameters(), lr=STAGES["lr"])
    recon_losses, clf_losses = [], []
    classifier = None
    for step in range(stop):
        if step < STAGES["pretrain_steps"]:
            x = x_all[torch.randint(0, len(x_all), (STAGES["batch"],), generator=gen)]
            keep = (torch.rand(x.shape, generator=gen) > STAGES["mask_rate"]).float()
            loss = F.mse_loss(autoencoder(x * keep), x)
            opt.zero_grad()
            loss.backward()
            opt.step()
            recon_losses.append(loss.item())
            if step + 1 == STAGES["pretrain_steps"]:
                torch.save({"model": autoencoder.module.state_dict(), "step": step + 1}, workdir / "pretrained.pt")
            continue
        if classifier is None:
            encoder = Encoder()
            encoder.load_state_dict(encoder_state(workdir / "pretrained.pt"))
            loaded = {k: v.clone() for k, v in encoder.state_dict().items()}
            classifier = nn.Sequential(encoder, nn.ReLU(), nn.Linear(8, 2))
            opt = torch.optim.Adam(classifier.parameters(), lr=STAGES["lr"])
        idx = torch.randint(0, len(x_lab), (32,), generator=gen)
        loss = F.cross_entropy(classifier(x_lab[idx]), y_lab[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        clf_losses.append(loss.item())
    if classifier is None:  # stopped during pre-training
        return {"steps": len(recon_losses)}
    with torch.no_grad():
        acc = (classifier(x_test).argmax(1) == y_test).float().mean().item()
        saved = torch.load(workdir / "pretrained.pt", weights_only=True)["model"]
        saved = {k.removeprefix("module.").removeprefix("encoder."): v for k, v in saved.items()}
        pretrained_loaded = all(torch.equal(v, saved[k]) for k, v in loaded.items())
    return {"steps": len(recon_losses) + len(clf_losses), "finetune_steps": len(clf_losses), "test_acc": acc,
            "pretrained_loaded": int(pretrained_loaded), "pretrain_loss": sum(recon_losses[-5:]) / 5}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    x_all, _ = unlabelled_rows(seed, 4000)
    x_lab, y_lab = unlabelled_rows(seed + 1, STAGES["labelled"])
    x_test, y_test = unlabelled_rows(seed + 2, 1000)
    folder = Path(workdir)
    folder.mkdir(parents=True, exist_ok=True)
    total = STAGES["pretrain_steps"] + STAGES["finetune_steps"]
    return run(folder, x_all, x_lab, y_lab, x_test, y_test, seed, total if until is None else until)
