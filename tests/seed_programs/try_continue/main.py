"""Exceptional data: the recorded surgery wraps the loop body in `try: ... except: continue`.

The label of batch 3 is out of range, so `F.cross_entropy` raises inside an `if`. The surgery
(`(surgery-1)train.py`) wraps the whole loop body; the bad batch is left out and training goes on
in the same epoch, with the same model and optimizer.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

import daifu

daifu.TRANSFORM_REGISTRY['REPEAT_ACTIONS'] = ['Surgery']
print_val = [0]
classify = True


def make_loader():
    torch.manual_seed(0)
    loader = []
    for _ in range(6):
        x = torch.randn(4, 5)
        y = torch.randint(0, 3, (4,))
        loader.append((x, y))
    loader[3][1][0] = 7  # an exceptional label
    return loader


@daifu.transform(globals())
def train(model, optimizer, loader):
    model.train()
    done = []
    for step, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        out = model(x)
        if classify:
            loss = F.cross_entropy(out, y)
            loss.backward()
            optimizer.step()
        done.append(step)
    return done


@daifu.transform(globals())
def main():
    torch.manual_seed(0)
    model = nn.Linear(5, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    done = train(model, optimizer, make_loader())
    weight_sum = round(model.weight.sum().item(), 4)
    print_val[0] = weight_sum
    print('RESULT', done, weight_sum)


if __name__ == '__main__':
    main()
    daifu.log_program_end(print_val[0])
