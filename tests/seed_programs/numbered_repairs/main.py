"""Three crashes, three recorded repairs, `['Surgery', 'Action', 'Surgery']`, in two functions.

Repair N reads `(surgery-N)<func>.py` or `(action-N)<func>.py`, N counted over the run:
1. `train` flattens the batch into one vector (a shape bug): surgery-1 fixes the line;
2. `evaluate` calls a module-level `metric` with a bad `dim`: action-2 redefines `metric`;
3. in epoch 2 the learning-rate table runs out: surgery-3 (made from surgery-1's source,
   as the prototype's `focus` copies the current source) clamps the index.
The module code after `main()` reads `score`, a local of `main`.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

import daifu

daifu.TRANSFORM_REGISTRY['REPEAT_ACTIONS'] = ['Surgery', 'Action', 'Surgery']
lrs = [0.1, 0.05]


def make_batches():
    torch.manual_seed(0)
    batches = []
    for _ in range(4):
        x = torch.randn(4, 3)
        batches.append((x, x.sum(dim=1, keepdim=True)))
    return batches


def metric(out, y):
    return (out - y).abs().mean(dim=2)


@daifu.transform(globals())
def train(model, optimizer, batches, epoch):
    lr = lrs[epoch]
    for group in optimizer.param_groups:
        group['lr'] = lr
    for x, y in batches:
        out = model(x.flatten())
        loss = F.mse_loss(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


@daifu.transform(globals())
def evaluate(model, batches):
    errors = []
    with torch.no_grad():
        for x, y in batches:
            errors.append(metric(model(x), y).item())
    return round(sum(errors) / len(errors), 4)


@daifu.transform(globals())
def main():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=lrs[0])
    batches = make_batches()
    scores = []
    for epoch in range(3):
        train(model, optimizer, batches, epoch)
        score = evaluate(model, batches)
        scores.append(score)
    print('RESULT', scores)


main()
daifu.log_program_end(score)
