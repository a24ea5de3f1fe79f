"""External (pytorch/examples, time_sequence_prediction/train.py), API misuse: an LBFGS closure that returns nothing.

Adapted from pytorch/examples time_sequence_prediction (train.py and generate_sine_wave.py;
BSD-3-Clause, Copyright (c) 2017 the PyTorch contributors). `Sequence` and the training loop
(LBFGS with a closure, then a prediction of the future without gradients) are upstream's;
changed to run here: the module-level loop is the function `train`, `traindata.pt` is generated
in code by upstream's `generate_sine_wave.py` with fewer, shorter waves (20 of 100 samples; the
prediction runs 100 samples ahead), 3 steps, and the plots (matplotlib) are NumPy files of the
same predictions. The program writes no checkpoint.

The injected bug: the closure ends with `loss.backward()` and no `return loss`, as a closure for
an optimizer that does not need one would. LBFGS evaluates `float(closure())`, and fails on
None at the first step.
"""

import argparse
import os

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

import daifu
from DLFailureBenchmark.hosts import external

STEP_NAME = "i"


class Sequence(nn.Module):
    def __init__(self):
        super(Sequence, self).__init__()
        self.lstm1 = nn.LSTMCell(1, 51)
        self.lstm2 = nn.LSTMCell(51, 51)
        self.linear = nn.Linear(51, 1)

    def forward(self, input, future = 0):
        outputs = []
        h_t = torch.zeros(input.size(0), 51, dtype=torch.double)
        c_t = torch.zeros(input.size(0), 51, dtype=torch.double)
        h_t2 = torch.zeros(input.size(0), 51, dtype=torch.double)
        c_t2 = torch.zeros(input.size(0), 51, dtype=torch.double)

        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for i in range(future):# if we should predict the future
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        outputs = torch.cat(outputs, dim=1)
        return outputs


@daifu.transform
def train(opt, seq, criterion, optimizer, input, target, test_input, test_target, outdir):
    test_losses = []
    #begin to train
    for i in range(opt.steps):
        print('STEP: ', i)
        def closure():
            optimizer.zero_grad()
            out = seq(input)
            loss = criterion(out, target)
            print('loss:', loss.item())
            loss.backward()
        optimizer.step(closure)
        # begin to predict, no need to track gradient here
        with torch.no_grad():
            future = opt.future
            pred = seq(test_input, future=future)
            loss = criterion(pred[:, :-future], test_target)
            print('test loss:', loss.item())
            y = pred.detach().numpy()
        test_losses.append(loss.item())
        # the plot of the predictions: their values
        np.save(os.path.join(outdir, 'predict%d.npy' % i), y[:3])
    return test_losses


def main(workdir, seed=0, resume=None, until=None):
    if resume is not None:
        raise ValueError("time_sequence_prediction writes no checkpoint: there is nothing to resume from")
    opt = argparse.Namespace(steps=3 if until is None else until, future=100)
    # set random seed to 0
    np.random.seed(seed)
    torch.manual_seed(seed)
    # load data and make training set
    data = external.sine_waves(n=20, length=100)  # torch.load('traindata.pt'), as generate_sine_wave.py writes it
    input = torch.from_numpy(data[3:, :-1])
    target = torch.from_numpy(data[3:, 1:])
    test_input = torch.from_numpy(data[:3, :-1])
    test_target = torch.from_numpy(data[:3, 1:])
    # build the model
    seq = Sequence()
    seq.double()
    criterion = nn.MSELoss()
    # use LBFGS as optimizer since we can load the whole data to train
    optimizer = optim.LBFGS(seq.parameters(), lr=0.8)
    test_losses = train(opt, seq, criterion, optimizer, input, target, test_input, test_target, workdir)
    return {"steps": len(test_losses), "test_loss": test_losses[-1] if test_losses else None}
