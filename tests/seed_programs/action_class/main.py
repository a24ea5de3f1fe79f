"""An action that defines a class and uses it: `super(Policy, self).__init__()` inside the action.

The module's `Policy` expects 3 features, the data has 4: `model(x)` raises on the first batch.
The recorded action (`(action-1)main.py`) redefines `Policy`, builds a new model and optimizer,
and the faulty statement runs again with them.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

import daifu

daifu.TRANSFORM_REGISTRY['REPEAT_ACTIONS'] = ['Action']
print_val = [0]


class Policy(nn.Module):
    def __init__(self):
        super(Policy, self).__init__()
        self.affine = nn.Linear(3, 8)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(F.relu(self.affine(x)))


@daifu.transform(globals())
def main():
    torch.manual_seed(0)
    data = torch.randn(24, 4)
    target = data.sum(dim=1, keepdim=True)
    model = Policy()
    optimizer = optim.SGD(model.parameters(), lr=0.05)
    for step in range(6):
        x = data[step * 4:(step + 1) * 4]
        y = target[step * 4:(step + 1) * 4]
        out = model(x)
        loss = F.mse_loss(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print_val[0] = round(loss.item(), 4)
    print('RESULT', type(model).__name__, model.affine.in_features, print_val[0])


if __name__ == '__main__':
    main()
    daifu.log_program_end(print_val[0])
