"""External (pytorch/examples, dcgan/main.py), tensor mismatch: flipped labels built as int64 for `BCELoss`.

Adapted from pytorch/examples dcgan/main.py (BSD-3-Clause, Copyright (c) 2017 the PyTorch
contributors). `weights_init`, `Generator`, `Discriminator` and the training loop are upstream's;
changed to run here: the module-level script is split into `train` and `main`, the `fake`
dataset is generated colour images of the same shape, options are `--ngf 16 --ndf 16
--batchSize 32` on the CPU, and `vutils.save_image` is `torch.save` of the same tensors (no
torchvision here); the loop counts the global step (for the harness's `until`). Checkpoints are
upstream's: `netG_epoch_N.pth` and `netD_epoch_N.pth` after each epoch.

The injected bug: a common GAN trick added to the discriminator's real batch from the second
epoch on, label flipping (5% of the real labels given as fake). The labels are built with
`torch.where(flip, fake_label, real_label)`, whose Python-int values make an int64 tensor, and
`BCELoss` wants float targets.
"""

import argparse
import os
import random

import torch
import torch.nn as nn
import torch.optim as optim
import torch.utils.data

import daifu
from DLFailureBenchmark.hosts import external

FLIP_FROM_EPOCH, FLIP_PROBABILITY = 1, 0.05


# custom weights initialization called on netG and netD
def weights_init(m):
    classname = m.__class__.__name__
    if classname.find('Conv') != -1:
        torch.nn.init.normal_(m.weight, 0.0, 0.02)
    elif classname.find('BatchNorm') != -1:
        torch.nn.init.normal_(m.weight, 1.0, 0.02)
        torch.nn.init.zeros_(m.bias)


class Generator(nn.Module):
    def __init__(self, ngpu):
        super(Generator, self).__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(
            # input is Z, going into a convolution
            nn.ConvTranspose2d(     nz, ngf * 8, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ngf * 8),
            nn.ReLU(True),
            # state size. (ngf*8) x 4 x 4
            nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            # state size. (ngf*4) x 8 x 8
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            # state size. (ngf*2) x 16 x 16
            nn.ConvTranspose2d(ngf * 2,     ngf, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf),
            nn.ReLU(True),
            # state size. (ngf) x 32 x 32
            nn.ConvTranspose2d(    ngf,      nc, 4, 2, 1, bias=False),
            nn.Tanh()
            # state size. (nc) x 64 x 64
        )

    def forward(self, input):
        if (input.is_cuda or input.is_xpu) and self.ngpu > 1:
            output = nn.parallel.data_parallel(self.main, input, range(self.ngpu))
        else:
            output = self.main(input)
        return output


class Discriminator(nn.Module):
    def __init__(self, ngpu):
        super(Discriminator, self).__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(
            # input is (nc) x 64 x 64
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf) x 32 x 32
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf*2) x 16 x 16
            nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 4),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf*4) x 8 x 8
            nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 8),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf*8) x 4 x 4
            nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False),
            nn.Sigmoid()
        )

    def forward(self, input):
        if (input.is_cuda or input.is_xpu) and self.ngpu > 1:
            output = nn.parallel.data_parallel(self.main, input, range(self.ngpu))
        else:
            output = self.main(input)

        return output.view(-1, 1).squeeze(1)


@daifu.transform
def train(opt, netD, netG, dataloader, optimizerD, optimizerG, criterion, fixed_noise, device):
    real_label = 1
    fake_label = 0
    step, history = 0, []
    for epoch in range(opt.niter):
        for i, data in enumerate(dataloader, 0):
            if opt.until is not None and step >= opt.until:
                return step, history
            ############################
            # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
            ###########################
            # train with real
            netD.zero_grad()
            real_cpu = data[0].to(device)
            batch_size = real_cpu.size(0)
            if epoch >= FLIP_FROM_EPOCH:  # label flipping: some real images labelled fake
                flip = torch.rand(batch_size, device=device) < FLIP_PROBABILITY
                label = torch.where(flip, fake_label, real_label)
            else:
                label = torch.full((batch_size,), real_label,
                                   dtype=real_cpu.dtype, device=device)

            output = netD(real_cpu)
            errD_real = criterion(output, label)
            errD_real.backward()
            D_x = output.mean().item()

            # train with fake
            noise = torch.randn(batch_size, nz, 1, 1, device=device)
            fake = netG(noise)
            label.fill_(fake_label)
            output = netD(fake.detach())
            errD_fake = criterion(output, label)
            errD_fake.backward()
            D_G_z1 = output.mean().item()
            errD = errD_real + errD_fake
            optimizerD.step()

            ############################
            # (2) Update G network: maximize log(D(G(z)))
            ###########################
            netG.zero_grad()
            label.fill_(real_label)  # fake labels are real for generator cost
            output = netD(fake)
            errG = criterion(output, label)
            errG.backward()
            D_G_z2 = output.mean().item()
            optimizerG.step()
            step += 1
            history.append((errD.item(), errG.item(), D_x))

            print('[%d/%d][%d/%d] Loss_D: %.4f Loss_G: %.4f D(x): %.4f D(G(z)): %.4f / %.4f'
                  % (epoch, opt.niter, i, len(dataloader),
                     errD.item(), errG.item(), D_x, D_G_z1, D_G_z2))
            if i % 100 == 0:
                torch.save(real_cpu, '%s/real_samples.pt' % opt.outf)
                fake = netG(fixed_noise)
                torch.save(fake.detach(), '%s/fake_samples_epoch_%03d.pt' % (opt.outf, epoch))

            if opt.dry_run:
                break
        # do checkpointing
        torch.save(netG.state_dict(), '%s/netG_epoch_%d.pth' % (opt.outf, epoch))
        torch.save(netD.state_dict(), '%s/netD_epoch_%d.pth' % (opt.outf, epoch))
    return step, history


def main(workdir, seed=0, resume=None, until=None):
    global nz, ngf, ndf, nc
    if resume is not None:
        raise ValueError("dcgan/main.py resumes from --netG/--netD, not from one checkpoint")
    opt = argparse.Namespace(dataset='fake', workers=0, batchSize=32, imageSize=64, nz=100, ngf=16, ndf=16, niter=3,
                             lr=0.0002, beta1=0.5, dry_run=False, ngpu=1, netG='', netD='',
                             outf=os.path.join(workdir, 'out'), manualSeed=1 + seed, until=until)
    try:
        os.makedirs(opt.outf)
    except OSError:
        pass
    random.seed(opt.manualSeed)
    torch.manual_seed(opt.manualSeed)
    device = torch.device("cpu")  # --accel on the machine this script was written for

    images = external.colour_images(320, opt.imageSize, seed=30 + seed)  # dset.FakeData(image_size=(3, 64, 64))
    dataset = torch.utils.data.TensorDataset(images)
    nc = 3
    dataloader = torch.utils.data.DataLoader(dataset, batch_size=opt.batchSize,
                                             shuffle=True, num_workers=int(opt.workers))
    ngpu = int(opt.ngpu)
    nz = int(opt.nz)
    ngf = int(opt.ngf)
    ndf = int(opt.ndf)

    netG = Generator(ngpu).to(device)
    netG.apply(weights_init)
    netD = Discriminator(ngpu).to(device)
    netD.apply(weights_init)
    criterion = nn.BCELoss()
    fixed_noise = torch.randn(opt.batchSize, nz, 1, 1, device=device)

    # setup optimizer
    optimizerD = optim.Adam(netD.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))

    step, history = train(opt, netD, netG, dataloader, optimizerD, optimizerG, criterion, fixed_noise, device)
    tail = history[-10:]
    return {"steps": step, "loss_D": sum(h[0] for h in tail) / len(tail), "loss_G": sum(h[1] for h in tail) / len(tail),
            "D_x": sum(h[2] for h in tail) / len(tail)}
