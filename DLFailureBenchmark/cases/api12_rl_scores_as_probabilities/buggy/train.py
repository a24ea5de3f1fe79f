"""API misuse (actor-critic agent): logits passed where `Categorical` takes probabilities.

The actor's head now returns scores for numerical stability; the sampling line still reads
`Categorical(scores)`, whose first parameter is `probs`. A state where the scores have mixed
signs gives "probabilities" outside the simplex, and the distribution's validation raises.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.distributions import Categorical

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import rl

EPISODES, CKPT_EVERY = 60, 10


@daifu.transform
def train(model, optimizer, ckpt_dir, start, stop, seed):
    episode_returns = []
    for step in range(start, stop):
        env = rl.CartPole(seed * 1000 + step)
        state = env.reset()
        log_probs, values, rewards = [], [], []
        done = False
        while not done:
            scores, value = model(torch.from_numpy(state))
            m = Categorical(scores)
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
    torch.manual_seed(seed)  # the policy is built before `build` seeds: seed it first, for a repeatable run
    model, optimizer = rl.build(seed, rl.ScoringPolicy())
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, ckpt_dir, start, EPISODES if until is None else until, seed)
