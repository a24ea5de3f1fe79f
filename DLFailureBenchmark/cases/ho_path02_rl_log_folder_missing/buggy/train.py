"""Path problem (actor-critic agent), holdout: a log file in a folder nobody made.

Every 20 episodes the script appends the recent returns to `logs/returns.csv` under its working
folder, opened with plain `open(..., "a")`; the `logs` folder was never created, so the first
write, after episode 20, fails.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.distributions import Categorical

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import rl

EPISODES, CKPT_EVERY, LOG_EVERY = 60, 10, 20


@daifu.transform
def train(model, optimizer, ckpt_dir, log_path, start, stop, seed):
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
        loss = rl.a2c_loss(log_probs, values, rl.discounted(rewards))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        episode_returns.append(sum(rewards))
        if (step + 1) % LOG_EVERY == 0:
            with open(log_path, "a", encoding="utf-8") as log:
                log.write(f"{step + 1},{sum(episode_returns[-LOG_EVERY:]) / LOG_EVERY:.2f}\n")
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return rl.metrics(model, seed, episode_returns, len(episode_returns))


def main(workdir, seed=0, resume=None, until=None):
    model, optimizer = rl.build(seed)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    log_path = Path(workdir) / "logs" / "returns.csv"
    return train(model, optimizer, ckpt_dir, log_path, start, EPISODES if until is None else until, seed)
