"""A small classifier trained by Lightning's Trainer on CPU, on generated data: `max_steps`, a
step-wise scheduler, a callback counting batches."""

from __future__ import annotations

import tempfile

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from digest import digest, write


class Counting(L.Callback):
    def __init__(self) -> None:
        self.batches = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.batches += 1


class MLP(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
        self.losses: list[float] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        loss = F.cross_entropy(logits, y)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=1e-2)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def main() -> None:
    L.seed_everything(0, verbose=False)
    model = MLP()
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,)))
    counting = Counting()
    with tempfile.TemporaryDirectory() as folder:
        trainer = L.Trainer(
            max_steps=6, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False, default_root_dir=folder, callbacks=[counting],
        )
        trainer.fit(model, DataLoader(data, batch_size=8, shuffle=True))
    optimizer = trainer.optimizers[0]
    scheduler = trainer.lr_scheduler_configs[0].scheduler
    write({
        "losses": model.losses,
        "global_step": trainer.global_step,
        "callback_batches": counting.batches,
        "parameters": digest(dict(model.state_dict())),
        "optimizer": digest(optimizer.state_dict()),
        "scheduler": [scheduler.state_dict()["last_epoch"], scheduler.get_last_lr()],
    })


if __name__ == "__main__":
    main()
