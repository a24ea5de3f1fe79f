"""A small training run with a bug people write: `.numpy()` on a tensor that needs grad, at step 5.

`python remote_training.py` runs the buggy loop vaccinated (DaiFu's settings come from the
environment: the remote-approval tests set `DAIFU_APPROVE=remote`); `python remote_training.py fixed`
runs the hand-fixed loop, plain. Either prints one JSON line: the steps taken, the logged
confidences and the parameters, to compare a repaired run with the fixed one exactly.
"""

import json
import sys

import torch
from torch import nn
from torch.nn import functional as F

import daifu


def setup():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=generator)
    y = (x @ torch.randn(8, 3, generator=generator)).argmax(dim=1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    return model, torch.optim.Adam(model.parameters(), lr=1e-2), x, y


def train(model, optimizer, x_all, y_all, epochs, confidences):
    step = 0
    for _epoch in range(epochs):
        for start in range(0, len(x_all), 16):
            x, y = x_all[start : start + 16], y_all[start : start + 16]
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step % 5 == 0:
                confidences.append(float(logits.softmax(dim=1).max(dim=1).values.numpy().mean()))
    return step


def train_fixed(model, optimizer, x_all, y_all, epochs, confidences):
    step = 0
    for _epoch in range(epochs):
        for start in range(0, len(x_all), 16):
            x, y = x_all[start : start + 16], y_all[start : start + 16]
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step % 5 == 0:
                confidences.append(float(logits.softmax(dim=1).max(dim=1).values.detach().numpy().mean()))
    return step


def main(which):
    model, optimizer, x, y = setup()
    confidences = []
    run = train_fixed if which == "fixed" else daifu.transform(train)
    steps = run(model, optimizer, x, y, 3, confidences)
    parameters = [p.detach().flatten().tolist() for p in model.parameters()]
    print(json.dumps({"steps": steps, "confidences": confidences, "parameters": parameters}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "buggy")
