"""Path problem (actor-critic agent): a checkpoint loaded under a different name than it was saved.

The script keeps the policy with the best 10-episode return in `best-policy.pt`; at episode 40
it restarts the last phase from it, reading `best_policy.pt`.

Fixed: the name it was saved under, `best-policy.pt`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.distributions import Categorical

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import rl

EPISODES, CKPT_EVERY = 60, 10
RELOAD_AT = 40


@daifu.transform
def train(model, optimizer, ckpt_dir, start, stop, seed):
    episode_returns = []
    best_return = float("-inf")
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
        if (step + 1) % 10 == 0 and sum(episode_returns[-10:]) > best_return:
            best_return = sum(episode_returns[-10:])
            torch.save({"model": model.state_dict()}, ckpt_dir / "best-policy.pt")
        if step + 1 == RELOAD_AT:
            best_path = ckpt_dir / "best-policy.pt"
            model.load_state_dict(torch.load(best_path)["model"])
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return rl.metrics(model, seed, episode_returns, len(episode_returns))


def main(workdir, seed=0, resume=None, until=None):
    model, optimizer = rl.build(seed)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, ckpt_dir, start, EPISODES if until is None else until, seed)
