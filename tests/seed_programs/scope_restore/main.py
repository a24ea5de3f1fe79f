"""The prototype's scope model in detail: when names become globals, and what is left after the call.

- a parameter is a module global for the whole call, and a module global of the same name is
  restored when the call returns;
- a name `main` assigns is a global from that statement on: a helper reads it at once;
- a callee that rebinds a global (`global lr`) changes what `main` reads next;
- after the call, a global that existed before and that `main` assigned with `=` is restored,
  while the names `main` created stay, and so does an augmented assignment (`+=`).
"""

import torch

import daifu

daifu.TRANSFORM_REGISTRY['REPEAT_ACTIONS'] = None

epochs = 100  # a module setting with the same name as main's parameter
lr = 9.0  # a module setting main assigns
steps_done = 0  # a module counter main increments


def step_size():
    return lr * 0.5


def decay():
    global lr
    lr = lr * 0.5


def seen_epochs():
    return epochs


@daifu.transform(globals())
def main(epochs):
    torch.manual_seed(0)
    lr = 0.8
    w = torch.zeros(3)
    target = torch.tensor([1.0, -2.0, 3.0])
    sizes = []
    for epoch in range(epochs):
        grad = 2 * (w - target)
        w = w - step_size() * grad
        sizes.append(round(step_size(), 4))
        decay()
        steps_done += 1
    print('RESULT inside', seen_epochs(), round(lr, 4))
    final_loss = round(float(((w - target) ** 2).sum()), 6)
    return final_loss


result = main(3)
print('RESULT after', epochs, lr, steps_done, sizes, final_loss, result)
daifu.log_program_end(final_loss)
