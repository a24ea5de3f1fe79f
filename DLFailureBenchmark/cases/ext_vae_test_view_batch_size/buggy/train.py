"""External (pytorch/examples, vae/main.py), API misuse: a `view` with the training batch size on a smaller test batch.

Adapted from pytorch/examples vae/main.py (BSD-3-Clause, Copyright (c) 2017 the PyTorch
contributors). `VAE`, `loss_function`, `train` and `test` are upstream's; changed to run here:
MNIST is replaced by generated digits of the same shapes and types (`ToTensor()` only, as
upstream), argparse by a namespace of its options, the accelerator by the CPU, and
`save_image` by `torch.save` of the same tensors (no torchvision here); `train` counts the global
step (for the harness's `until`) and `test` returns its loss. No checkpoint is written mid-run.

The bug is upstream's, latent: `test` shows its first batch's reconstructions with
`recon_batch.view(args.batch_size, 1, 28, 28)`, which assumes a full batch. Run on a quick
100-image test subset (smaller than one batch of 128), the first test batch holds 100 images and
the `view` fails at the end of the first epoch.
"""

import argparse
from pathlib import Path

import torch
import torch.utils.data
from torch import nn, optim
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.hosts import external


class VAE(nn.Module):
    def __init__(self):
        super(VAE, self).__init__()

        self.fc1 = nn.Linear(784, 400)
        self.fc21 = nn.Linear(400, 20)
        self.fc22 = nn.Linear(400, 20)
        self.fc3 = nn.Linear(20, 400)
        self.fc4 = nn.Linear(400, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5*logvar)
        eps = torch.randn_like(std)
        return mu + eps*std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


# Reconstruction + KL divergence losses summed over all elements and batch
def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction='sum')

    # see Appendix B from VAE paper:
    # Kingma and Welling. Auto-Encoding Variational Bayes. ICLR, 2014
    # https://arxiv.org/abs/1312.6114
    # 0.5 * sum(1 + log(sigma^2) - mu^2 - sigma^2)
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())

    return BCE + KLD


@daifu.transform
def train(epoch, step):
    model.train()
    train_loss = 0
    for batch_idx, (data, _) in enumerate(train_loader):
        if args.until is not None and step >= args.until:
            break
        data = data.to(device)
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(data)
        loss = loss_function(recon_batch, data, mu, logvar)
        loss.backward()
        train_loss += loss.item()
        optimizer.step()
        step += 1
        if batch_idx % args.log_interval == 0:
            print('Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}'.format(
                epoch, batch_idx * len(data), len(train_loader.dataset),
                100. * batch_idx / len(train_loader),
                loss.item() / len(data)))

    print('====> Epoch: {} Average loss: {:.4f}'.format(
          epoch, train_loss / len(train_loader.dataset)))
    return step


@daifu.transform
def test(epoch):
    model.eval()
    test_loss = 0
    with torch.no_grad():
        for i, (data, _) in enumerate(test_loader):
            data = data.to(device)
            recon_batch, mu, logvar = model(data)
            test_loss += loss_function(recon_batch, data, mu, logvar).item()
            if i == 0:
                n = min(data.size(0), 8)
                comparison = torch.cat([data[:n],
                                      recon_batch.view(args.batch_size, 1, 28, 28)[:n]])
                torch.save(comparison.cpu(), results / ('reconstruction_' + str(epoch) + '.pt'))

    test_loss /= len(test_loader.dataset)
    print('====> Test set loss: {:.4f}'.format(test_loss))
    return test_loss


def main(workdir, seed=0, resume=None, until=None):
    global args, device, train_loader, test_loader, model, optimizer, results
    if resume is not None:
        raise ValueError("vae/main.py writes no checkpoint: there is nothing to resume from")
    args = argparse.Namespace(batch_size=128, epochs=3, no_accel=True, seed=1 + seed, log_interval=10, until=until)
    torch.manual_seed(args.seed)
    device = torch.device("cpu")  # an accelerator on the machine this script was written for
    results = Path(workdir) / "results"
    results.mkdir(parents=True, exist_ok=True)
    train_loader = torch.utils.data.DataLoader(
        external.Digits(1280, seed=10 + seed, transform=external.to_tensor),  # datasets.MNIST(train=True)
        batch_size=args.batch_size, shuffle=True)
    test_loader = torch.utils.data.DataLoader(
        external.Digits(100, seed=20 + seed, transform=external.to_tensor),  # a 100-image subset for quick tests
        batch_size=args.batch_size, shuffle=False)
    model = VAE().to(device)
    optimizer = optim.Adam(model.parameters(), lr=1e-3)

    step = 0
    for epoch in range(1, args.epochs + 1):
        step = train(epoch, step)
        test_loss = test(epoch)
        with torch.no_grad():
            sample = torch.randn(64, 20).to(device)
            sample = model.decode(sample).cpu()
            torch.save(sample.view(64, 1, 28, 28), results / ('sample_' + str(epoch) + '.pt'))
        if until is not None and step >= until:
            break
    return {"steps": step, "test_loss": test_loss}
