"""Two plays for one crash, `[['Action', 'Surgery']]`, applied in order.

Two batches (steps 2 and 4) come as float64 and `model(x)` raises on the first of them. The
action converts the batch at hand; the surgery converts every batch from then on. Both are
applied to the first crash, so the second bad batch never crashes: one repair in the record.
"""

import torch
import torch.nn as nn

import daifu

daifu.TRANSFORM_REGISTRY['REPEAT_ACTIONS'] = [['Action', 'Surgery']]


def make_batches():
    torch.manual_seed(0)
    batches = [torch.randn(4, 3) for _ in range(6)]
    batches[2] = batches[2].double()
    batches[4] = batches[4].double()
    return batches


@daifu.transform(globals())
def main():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    converted = []
    losses = []
    for step, x in enumerate(make_batches()):
        out = model(x)
        loss = out.pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(round(loss.item(), 4))
    return losses


losses = main()
print('RESULT', converted, losses)
daifu.log_program_end(losses[-1])
