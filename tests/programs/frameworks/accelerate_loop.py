"""A small regression trained in the user's own loop under Accelerate on CPU, on generated data:
`accelerator.backward`, gradient accumulation, a step-wise scheduler."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.utils.data import DataLoader, TensorDataset

from digest import digest, write


def training_function() -> dict:
    set_seed(0)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    losses = []
    model.train()
    for x, y in loader:
        with accelerator.accumulate(model):
            prediction = model(x)
            loss = F.mse_loss(prediction, y)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        losses.append(loss.item())
    return {
        "losses": losses,
        "optimizer_steps": accelerator.step,
        "parameters": digest(dict(accelerator.unwrap_model(model).state_dict())),
        "optimizer": digest(optimizer.state_dict()),
        "scheduler": [scheduler.scheduler.state_dict()["last_epoch"], scheduler.get_last_lr()],
    }


def main() -> None:
    write(training_function())


if __name__ == "__main__":
    main()
