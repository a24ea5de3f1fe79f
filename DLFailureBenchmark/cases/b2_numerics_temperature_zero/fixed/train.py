"""Contextual bandit (which of five offers to show a visitor) with annealed Boltzmann exploration.

A Q-network estimates each offer's reward from an 8-dimensional visitor context. Each step it
shows offers to 32 visitors, sampling each offer from softmax(Q / temperature), and regresses the
observed rewards of the shown offers. The temperature falls linearly from 1 to 0 over the first
120 steps, from exploring to exploiting. Scored: the mean reward of the shown offers in the last 50
steps, and of the greedy policy on 1000 new visitors.

Fixed: the temperature stops at a floor of 0.05 (close to greedy). Annealed to exactly 0 it divides
the Q-values by zero at step 120, and would turn negative (preferring the worst offers) after it.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

CONTEXT, OFFERS = 8, 5
STEPS, BATCH, CKPT_EVERY = 200, 32, 25
T0, ANNEAL_STEPS, T_MIN = 1.0, 120, 0.05


def payoff():
    return torch.randn(CONTEXT, OFFERS, generator=torch.Generator().manual_seed(131))


def visitors(g, count):
    return torch.randn(count, CONTEXT, generator=g)


@daifu.transform
def train(model, optimizer, test, ckpt_dir, start, stop, seed):
    late_rewards = []
    for step in range(start, stop):
        g = torch.Generator().manual_seed(seed * 100_003 + step)
        context = visitors(g, BATCH)
        q = model(context)
        temperature = max(T_MIN, T0 * (1 - step / ANNEAL_STEPS))
        probs = F.softmax(q.detach() / temperature, dim=1)
        offer = torch.multinomial(probs, 1, generator=g).squeeze(1)
        reward = (context @ payoff())[torch.arange(BATCH), offer] + 0.3 * torch.randn(BATCH, generator=g)
        loss = F.mse_loss(q[torch.arange(BATCH), offer], reward)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step >= STEPS - 50:
            late_rewards.append(reward.mean().item())
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    with torch.no_grad():
        greedy = model(test).argmax(1)
        values = test @ payoff()
        greedy_reward = values[torch.arange(len(test)), greedy].mean().item()
        best_reward = values.max(1).values.mean().item()
    return {"steps": stop - start, "greedy_reward": greedy_reward, "best_reward": best_reward,
            "late_train_reward": sum(late_rewards) / max(len(late_rewards), 1)}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(CONTEXT, 32), nn.ReLU(), nn.Linear(32, OFFERS))
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    test = visitors(torch.Generator().manual_seed(seed * 7 + 3), 1000)
    return train(model, optimizer, test, ckpt_dir, start, STEPS if until is None else until, seed)
