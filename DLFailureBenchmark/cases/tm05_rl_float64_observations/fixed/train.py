"""Tensor mismatch (actor-critic agent): float64 observations into a float32 network.

Half-way, the curriculum switches to the cart-pole with sensor noise. Its noise comes from
NumPy, whose default dtype is float64, so its observations are float64 and `torch.from_numpy`
keeps them so.

Fixed: `torch.from_numpy(state).float()`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.distributions import Categorical

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import rl

EPISODES, CKPT_EVERY = 60, 10
NOISY_FROM = 30


@daifu.transform
def train(model, optimizer, ckpt_dir, start, stop, seed):
    episode_returns = []
    for step in range(start, stop):
        env_class = rl.CartPole if step < NOISY_FROM else rl.NoisyCartPole
        env = env_class(seed * 1000 + step)
        state = env.reset()
        log_probs, values, rewards = [], [], []
        done = False
        while not done:
            probs, value = model(torch.from_numpy(state).float())
            m = Categorical(probs)
            action = m.sample()
            state, reward, done = env.step(action.item())
            log_probs.append(m.log_prob(action))
            values.append(value)
            rewards.append(reward)
        loss = rl.a2c_loss(log_probs, values, rl.discounted(rewards))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        episode_returns.append(sum(rewards))
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return rl.metrics(model, seed, episode_returns, len(episode_returns))


def main(workdir, seed=0, resume=None, until=None):
    model, optimizer = rl.build(seed)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, ckpt_dir, start, EPISODES if until is None else until, seed)
