"""A repeated experiment with nothing to repair: the prototype's `fixed_repeated_experiments` style.

The program has no bug; `REPEAT_ACTIONS = None` only marks the run as a repeated experiment, so
`log_program_end` copies the record to `experiment_record_<time>.log` for the run's overhead and
quality to be collected. Plain Python runs it the same way.
"""

import torch
import torch.nn.functional as F

import daifu

daifu.TRANSFORM_REGISTRY['REPEAT_ACTIONS'] = None
print_val = [0]


@daifu.transform(globals())
def main():
    torch.manual_seed(0)
    x = torch.randn(16, 3)
    y = x @ torch.tensor([[1.0], [-1.0], [0.5]])
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(20):
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print_val[0] = round(loss.item(), 4)
    print('RESULT', print_val[0])


if __name__ == '__main__':
    main()
    daifu.log_program_end(print_val[0])
