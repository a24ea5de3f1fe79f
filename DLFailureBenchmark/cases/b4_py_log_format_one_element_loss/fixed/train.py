"""Multi-task tabular network (a regression head and a churn head) with a plain-text metrics log.

`multitask_loss` weights the two task losses and sums them with `keepdim=True`, so the total
is a one-element vector, shape (1,), not a scalar. `backward()` accepts it; the first log line
(step 20) formats it with `:.4f`, which a tensor of one dimension does not support.

Fixed: the log line formats the loss's value, `loss.item()`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

CONFIG = {"steps": 120, "batch": 64, "lr": 2e-3, "log_every": 20, "ckpt_every": 40, "task_weights": [1.0, 0.5]}


def customers(seed: int, n: int):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=gen)
    spend = x[:, 0] * 2 + x[:, 1] - 0.5 * x[:, 2] ** 2 + 0.2 * torch.randn(n, generator=gen)
    churn = ((x[:, 3] - x[:, 0] + 0.3 * torch.randn(n, generator=gen)) > 0.5).float()
    return x, spend, churn


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU())
        self.spend, self.churn = nn.Linear(32, 1), nn.Linear(32, 1)

    def forward(self, x):
        h = self.trunk(x)
        return self.spend(h).squeeze(-1), self.churn(h).squeeze(-1)


def multitask_loss(outputs, spend, churn, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    pred_spend, churn_logit = outputs
    per_task = torch.stack([F.mse_loss(pred_spend, spend), F.binary_cross_entropy_with_logits(churn_logit, churn)])
    return torch.sum(weights * per_task, dim=0, keepdim=True), per_task.detach()


class MetricsLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines = 0

    def write(self, line: str) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")
        self.lines += 1


@torch.no_grad()
def evaluate(model: TwoHeads, data) -> tuple[float, float]:
    x, spend, churn = data
    pred_spend, churn_logit = model(x)
    rmse = torch.sqrt(F.mse_loss(pred_spend, spend)).item()
    acc = ((churn_logit > 0).float() == churn).float().mean().item()
    return rmse, acc


@daifu.transform
def train(model, optimizer, train_data, val_data, log, ckpt_dir, start, stop, seed):
    weights = torch.tensor(CONFIG["task_weights"])
    gen = torch.Generator().manual_seed(seed)
    x_all, spend_all, churn_all = train_data
    history = []
    for step in range(start, stop):
        idx = torch.randint(0, len(x_all), (CONFIG["batch"],), generator=gen)
        loss, per_task = multitask_loss(model(x_all[idx]), spend_all[idx], churn_all[idx], weights)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append(per_task)
        if (step + 1) % CONFIG["log_every"] == 0:
            rmse, acc = evaluate(model, val_data)
            log.write(f"step {step + 1:5d}  loss {loss.item():.4f}  spend_mse {per_task[0]:.4f}  churn_bce {per_task[1]:.4f}"
                      f"  val_rmse {rmse:.3f}  val_acc {acc:.3f}")
        if (step + 1) % CONFIG["ckpt_every"] == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    rmse, acc = evaluate(model, val_data)
    return {"steps": len(history), "val_rmse": rmse, "val_churn_acc": acc, "log_lines": log.lines}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    x, spend, churn = customers(seed, 2000)
    train_data, val_data = (x[:1600], spend[:1600], churn[:1600]), (x[1600:], spend[1600:], churn[1600:])
    model = TwoHeads()
    optimizer = torch.optim.Adam(model.parameters(), lr=CONFIG["lr"])
    start = load_checkpoint(resume, model, optimizer)
    run_dir = Path(workdir)
    (run_dir / "ckpt").mkdir(parents=True, exist_ok=True)
    log = MetricsLog(run_dir / "metrics.log")
    return train(model, optimizer, train_data, val_data, log, run_dir / "ckpt", start,
                 CONFIG["steps"] if until is None else until, seed)
