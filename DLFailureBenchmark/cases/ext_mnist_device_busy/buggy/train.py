"""External (pytorch/examples, mnist/main.py), GPU contention: the device is busy when a batch is moved.

Adapted from pytorch/examples mnist/main.py (BSD-3-Clause, Copyright (c) 2017 the PyTorch
contributors). `Net`, `train` and `test` are upstream's; changed to run here: MNIST is replaced by
generated digits of the same shapes and types (fewer: 320 for
training, 200 for testing, batches of 32), argparse by a namespace of its options, the
accelerator by the CPU; `train` counts the global step (for the harness's `until`) and `test`
returns what it prints. The program writes no checkpoint mid-run (only `--save-model` at the end).

The fault: the GPU runs in exclusive-process mode and, at step 25, another job takes it for half
a second; `data.to(device)` fails with "CUDA-capable device(s) is/are busy or unavailable"
(simulated on the CPU).
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR

import daifu
from DLFailureBenchmark.faults import BusyDevice
from DLFailureBenchmark.hosts import external
from DLFailureBenchmark.hosts.common import retrying

BUSY_AT = 25


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


@daifu.transform
def train(args, model, device, train_loader, optimizer, epoch, step):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        if args.until is not None and step >= args.until:
            break
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        step += 1
        if batch_idx % args.log_interval == 0:
            print('Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}'.format(
                epoch, batch_idx * len(data), len(train_loader.dataset),
                100. * batch_idx / len(train_loader), loss.item()))
            if args.dry_run:
                break
    return step


def test(model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()  # sum up batch loss
            pred = output.argmax(dim=1, keepdim=True)  # get the index of the max log-probability
            correct += pred.eq(target.view_as(pred)).sum().item()

    test_loss /= len(test_loader.dataset)

    print('\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n'.format(
        test_loss, correct, len(test_loader.dataset),
        100. * correct / len(test_loader.dataset)))
    return test_loss, correct / len(test_loader.dataset)


def main(workdir, seed=0, resume=None, until=None):
    if resume is not None:
        raise ValueError("mnist/main.py writes no checkpoint mid-run: there is nothing to resume from")
    args = argparse.Namespace(batch_size=32, test_batch_size=1000, epochs=3, lr=1.0, gamma=0.7, no_accel=True,
                              dry_run=False, seed=1 + seed, log_interval=10, save_model=False, until=until)
    torch.manual_seed(args.seed)
    device = torch.device("cpu")  # an accelerator on the machine this script was written for

    train_kwargs = {'batch_size': args.batch_size}
    test_kwargs = {'batch_size': args.test_batch_size}
    transform = external.normalize(0.1307, 0.3081)
    dataset1 = external.Digits(320, seed=10 + seed, transform=transform)  # datasets.MNIST('../data', train=True, ...)
    dataset2 = external.Digits(200, seed=20 + seed, transform=transform)  # datasets.MNIST('../data', train=False, ...)
    train_loader = torch.utils.data.DataLoader(dataset1, **train_kwargs)
    test_loader = torch.utils.data.DataLoader(dataset2, **test_kwargs)

    model = Net().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    steps_per_epoch, test_batches = len(train_loader), len(test_loader)
    transfers_before = 2 * BUSY_AT + 2 * test_batches * (BUSY_AT // steps_per_epoch)
    BusyDevice(from_call=transfers_before + 1, seconds=0.5).install()  # the other job, from step 25

    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    step = 0
    for epoch in range(1, args.epochs + 1):
        step = train(args, model, device, train_loader, optimizer, epoch, step)
        test_loss, accuracy = test(model, device, test_loader)
        scheduler.step()
        if until is not None and step >= until:
            break

    if args.save_model:
        torch.save(model.state_dict(), "mnist_cnn.pt")
    return {"steps": step, "test_loss": test_loss, "accuracy": accuracy}
