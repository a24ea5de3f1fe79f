"""Tensor mismatch (actor-critic agent), holdout: one-step TD targets one element short.

From episode 30 the script trades the Monte-Carlo returns for lower-variance one-step TD
targets, `r_t + gamma * V(s_t+1)`. The next-state values are `value[1:]`, one fewer than the
rewards: the terminal state's value (zero) was never appended.

Fixed: the terminal state's value, zero, appended to the next-state values.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.distributions import Categorical

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import rl

EPISODES, CKPT_EVERY = 60, 10
TD_FROM = 30


@daifu.transform
def train(model, optimizer, ckpt_dir, start, stop, seed):
    episode_returns = []
    for step in range(start, stop):
        env = rl.CartPole(seed * 1000 + step)
        state = env.reset()
        log_probs, values, rewards = [], [], []
        done = False
        while not done:
            probs, value = model(torch.from_numpy(state))
            m = Categorical(probs)
            action = m.sample()
            state, reward, done = env.step(action.item())
            log_probs.append(m.log_prob(action))
            values.append(value)
            rewards.append(reward)
        if step < TD_FROM:
            returns = rl.discounted(rewards)
        else:  # one-step TD targets: r + gamma * V(next state)
            next_values = torch.cat([torch.cat(values).detach()[1:], torch.zeros(1)])
            returns = torch.tensor(rewards) + rl.GAMMA * next_values
        loss = rl.a2c_loss(log_probs, values, returns)
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
