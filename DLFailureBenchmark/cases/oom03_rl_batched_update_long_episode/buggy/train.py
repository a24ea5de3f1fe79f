"""Out-of-memory bug (actor-critic agent): a batched update that grows with the episode.

Actions are chosen without autograd, and the update recomputes the whole episode in one batched
forward pass. The better the agent, the longer the episode: past about 70 states the activations
(simulated GPU, 15.77 GiB) no longer fit.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.distributions import Categorical

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import rl
import numpy as np

from DLFailureBenchmark.faults import MiB, SimulatedDevice

EPISODES, CKPT_EVERY = 60, 10


@daifu.transform
def train(model, optimizer, ckpt_dir, start, stop, seed):
    episode_returns = []
    for step in range(start, stop):
        env = rl.CartPole(seed * 1000 + step)
        state = env.reset()
        states, actions, rewards = [], [], []
        done = False
        while not done:
            with torch.no_grad():
                probs, _ = model(torch.from_numpy(state))
            action = Categorical(probs).sample()
            states.append(state)
            actions.append(action.item())
            state, reward, done = env.step(action.item())
            rewards.append(reward)
        states = torch.from_numpy(np.stack(states))
        probs, values = model(states)
        log_probs = Categorical(probs).log_prob(torch.tensor(actions))
        loss = rl.a2c_loss(list(log_probs), list(values), rl.discounted(rewards))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        episode_returns.append(sum(rewards))
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return rl.metrics(model, seed, episode_returns, len(episode_returns))


def main(workdir, seed=0, resume=None, until=None):
    model, optimizer = rl.build(seed)
    SimulatedDevice(bytes_per_element=53 * MiB).attach(model)  # the GPU this script was written for
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, ckpt_dir, start, EPISODES if until is None else until, seed)
